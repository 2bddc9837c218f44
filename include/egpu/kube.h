/* egpu/kube.h - the Kubernetes API client: configuration, requests, watch,
 * the list+watch cache (informer) and Lease leader election.
 *
 * Wire format: the kube-apiserver REST protocol as described in
 * shared/k8s-wire/api_protocol_notes.md (JSON bodies, Status objects for
 * errors, list chunking with limit/continue, line-delimited watch events with
 * BOOKMARKs and 410 Expired) and crd_lease_leader_election_notes.md (Lease
 * objects, client-go's tools/leaderelection semantics).
 *
 * DESIGN: one struct egpu_kube per API server, shared by every thread of a
 * component. It keeps a small pool of libcurl handles, each with its own
 * connection cache, so concurrent requests do not serialise and connections
 * stay alive between requests. Objects are jansson json_t values; a function
 * that hands one back gives the caller a reference to json_decref(). Request
 * bodies are capped (EGPU_KUBE_BODY_MAX, EGPU_KUBE_LIST_MAX per list page).
 *
 * Errors: 0 or a negative code. An answer of the API server that is not a
 * success is returned as the code below and, when st is not NULL, as the
 * API's Status in *st (code, reason, message):
 *   400, 422 -EINVAL    401 -EACCES    403 -EPERM      404 -ENOENT
 *   405 -EOPNOTSUPP     409 AlreadyExists -EEXIST      409 other EGPU_KUBE_ECONFLICT
 *   410 EGPU_KUBE_EEXPIRED             415 -ENOTSUP    429, 503 -EAGAIN
 *   504 -ETIMEDOUT      other 4xx -EINVAL              other 5xx -EIO
 * Transport failures: -ECONNREFUSED (cannot connect), -ETIMEDOUT, -EMSGSIZE
 * (reply above its cap), -ECANCELED (a stop flag was raised), -EIO; a reply
 * that is not the JSON it should be: -EPROTO. *err (may be NULL) gets one
 * line naming the method, path and cause.
 *
 * Time: durations are milliseconds (_ms) or seconds (_s) as named; internal
 * timing uses CLOCK_MONOTONIC.
 *
 * Objects come from tenants (pods, their annotations), so one object must
 * never stop a list or a watch: replies and events are decoded with
 * jansson's JSON_ALLOW_NUL (a "\u0000" anywhere in a string decodes), and
 * every string a component uses as a C string is read through
 * egpu_kube_str, which refuses one holding a NUL. A watch line that is not an
 * event at all, or is longer than the bound, is logged, counted and skipped;
 * the stream goes on.
 */
#ifndef EGPU_KUBE_H
#define EGPU_KUBE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include <yajl/yajl_common.h>

#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EGPU_KUBE_ECONFLICT (-ESTALE) /* 409 Conflict: stale resourceVersion, pod already bound */
#define EGPU_KUBE_EEXPIRED  (-ETIME)  /* 410: resourceVersion or continue token too old */

#define EGPU_KUBE_BODY_MAX ((size_t)16 << 20) /* one object or Status reply, bytes */
#define EGPU_KUBE_LIST_MAX ((size_t)64 << 20) /* one list page, bytes */
#define EGPU_KUBE_RV_MAX   64                 /* resourceVersion incl. NUL */

/* ------------------------------------------------------------------------ */
/* Configuration (src/kube/config.c)                                        */

/* Where and how to reach the API server. Every string is owned by the config
 * (freed by egpu_kube_config_free); NULL means "not set". */
struct egpu_kube_config {
    char *server;     /* base URL without trailing '/', e.g. "https://10.0.0.1:6443" */
    char *ns;         /* namespace of the context or of the pod; "default" when unset */
    char *context;    /* kubeconfig context used; NULL for in-cluster or explicit configs */
    char *token;      /* bearer token */
    char *token_file; /* file holding the token; re-read whenever it changes */
    char *username;   /* HTTP basic auth (with password) */
    char *password;
    char *ca_file;        /* PEM CA bundle path */
    char *ca_data;        /* PEM CA bundle (decoded certificate-authority-data) */
    size_t ca_data_len;   /* bytes */
    char *cert_file;      /* PEM client certificate path */
    char *cert_data;      /* PEM client certificate (decoded client-certificate-data) */
    size_t cert_data_len; /* bytes */
    char *key_file;       /* PEM client key path */
    char *key_data;       /* PEM client key (decoded client-key-data) */
    size_t key_data_len;  /* bytes */
    bool insecure;        /* insecure-skip-tls-verify: no server certificate check */
    long timeout_ms;      /* limit per request (not watches), default 30000 */
    char *user_agent;     /* User-Agent header, default "elastic-gpu/<version>" */
};

/* A config for server (a base URL, copied) with an optional bearer token
 * (copied; NULL = none). Returns 0, -EINVAL (server empty or not http(s)://)
 * or -ENOMEM; *out (free with egpu_kube_config_free) only on success. */
int egpu_kube_config_new(const char *server, const char *token, struct egpu_kube_config **out,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* Parse kubeconfig files (format: client-go clientcmd v1 Config, YAML or
 * JSON). paths is one path or a ':'-separated list as in $KUBECONFIG; as in
 * client-go, missing files in a list are skipped and the first file that sets
 * a value (current-context, or a named cluster, user or context) wins.
 * context names the context to use (NULL = current-context). Relative file
 * paths in an entry are relative to the file that holds it; *-data fields are
 * base64. Supported user auth: token, tokenFile, client-certificate[-data] +
 * client-key[-data], username + password. Returns 0, -ENOENT (no file, no
 * such context/cluster/user, no current context), EGPU_ESYNTAX (YAML or
 * base64 malformed, a field of the wrong type), -EINVAL (no server),
 * -ENOTSUP (exec or auth-provider plugins only) or -ENOMEM. */
int egpu_kube_config_from_kubeconfig(const char *paths, const char *context,
                                     struct egpu_kube_config **out,
                                     struct egpu_error *err) EGPU_MUST_CHECK;

/* The in-cluster config (client-go rest.InClusterConfig): server
 * https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (IPv6 hosts in
 * brackets), token from <sa_dir>/token (re-read when the kubelet rotates it),
 * CA <sa_dir>/ca.crt when readable, namespace from $POD_NAMESPACE, then
 * <sa_dir>/namespace, else "default". sa_dir NULL =
 * /var/run/secrets/kubernetes.io/serviceaccount. Returns 0, -ENOENT (either
 * variable empty, with client-go's message; token unreadable) or -ENOMEM. */
int egpu_kube_config_in_cluster(const char *sa_dir, struct egpu_kube_config **out,
                                struct egpu_error *err) EGPU_MUST_CHECK;

/* The config a component uses (kubectl's order): the file given by
 * --kubeconfig (kubeconfig not NULL), else $KUBECONFIG, else ~/.kube/config if
 * it exists, else in-cluster. context as in egpu_kube_config_from_kubeconfig.
 * Returns what the chosen loader returns; when it falls through to
 * in-cluster and that fails, the message names every place tried first:
 * "no kubeconfig: --kubeconfig not given; $KUBECONFIG not set;
 * /home/u/.kube/config: no such file; in-cluster: unable to load in-cluster
 * configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be
 * defined". */
int egpu_kube_config_load(const char *kubeconfig, const char *context,
                          struct egpu_kube_config **out, struct egpu_error *err) EGPU_MUST_CHECK;

/* Free cfg and its strings. NULL is a no-op. */
void egpu_kube_config_free(struct egpu_kube_config *cfg);

/* The decoding flags of every reply, event and Status (jansson json_loadb). */
#define EGPU_KUBE_JSON_FLAGS JSON_ALLOW_NUL

/* The value of v if it is a JSON string without a NUL character (which
 * JSON_ALLOW_NUL lets through and a C string would cut short), else NULL
 * (v NULL, not a string, or holding a NUL). Borrowed from v. Use it for
 * every string read from an API object as a C string (names, UUIDs,
 * annotation values we interpret). */
const char *egpu_kube_str(const json_t *v);

/* ------------------------------------------------------------------------ */
/* API Status (src/kube/status.c)                                           */

#define EGPU_KUBE_REASON_MAX 64

/* The API's Status object of a failed request (meta/v1 Status). */
struct egpu_kube_status {
    int code;                          /* Status.code, else the HTTP status */
    char reason[EGPU_KUBE_REASON_MAX]; /* "Conflict", "NotFound", ... ("" if none) */
    char message[EGPU_ERRMSG_MAX];     /* Status.message, cut to fit */
};

/* Fill *st from a reply body of len bytes and its HTTP status. A JSON
 * Status gives code, reason and message; any other body gives http_code, the
 * reason client-go assumes for that code, and the start of the body as the
 * message. Returns 0 when the body was a Status, -EPROTO otherwise (*st is
 * filled either way). Never fails on malformed input. */
int egpu_kube_status_parse(const char *body, size_t len, long http_code,
                           struct egpu_kube_status *st);

/* The return code for a failure Status (see the table at the top). */
int egpu_kube_status_errno(const struct egpu_kube_status *st);

/* ------------------------------------------------------------------------ */
/* Client and requests (src/kube/client.c, src/kube/resource.c)             */

struct egpu_kube;

/* Which resource a request names: /api/v1/... for group "" (core), else
 * /apis/<group>/<version>/...; namespaced resources take a namespace. */
struct egpu_kube_resource {
    const char *group;   /* "" for the core group */
    const char *version; /* "v1", "v1alpha1" */
    const char *plural;  /* lower-case plural, e.g. "pods" */
    bool namespaced;
};

extern const struct egpu_kube_resource egpu_kube_pods;              /* v1 pods */
extern const struct egpu_kube_resource egpu_kube_nodes;             /* v1 nodes */
extern const struct egpu_kube_resource egpu_kube_namespaces;        /* v1 namespaces */
extern const struct egpu_kube_resource egpu_kube_events;            /* v1 events */
extern const struct egpu_kube_resource egpu_kube_resourcequotas;    /* v1 resourcequotas */
extern const struct egpu_kube_resource egpu_kube_leases;            /* coordination.k8s.io/v1 */
extern const struct egpu_kube_resource egpu_kube_gpus;              /* elasticgpu.io/v1alpha1 GPU */
extern const struct egpu_kube_resource egpu_kube_elasticgpus;       /* ElasticGPU */
extern const struct egpu_kube_resource egpu_kube_elasticgpuclaims;  /* ElasticGPUClaim */
extern const struct egpu_kube_resource egpu_kube_elasticgpuclasses; /* ElasticGPUClass */
extern const struct egpu_kube_resource egpu_kube_gpubudgets;        /* GPUBudget */
extern const struct egpu_kube_resource egpu_kube_priorityclasses;   /* scheduling.k8s.io/v1 */
extern const struct egpu_kube_resource egpu_kube_resourceslices;    /* resource.k8s.io/v1 */
extern const struct egpu_kube_resource egpu_kube_resourceclaims;    /* resource.k8s.io/v1 */
extern const struct egpu_kube_resource egpu_kube_resourceclaimtemplates; /* resource.k8s.io/v1 */
extern const struct egpu_kube_resource egpu_kube_deviceclasses;          /* resource.k8s.io/v1 */

/* A client for cfg (copied; cfg may be freed afterwards). Makes no request.
 * Returns 0, -EINVAL (no server) or -ENOMEM; *out only on success. Thread
 * safe: any number of threads may use one client at once. */
int egpu_kube_new(const struct egpu_kube_config *cfg, struct egpu_kube **out,
                  struct egpu_error *err) EGPU_MUST_CHECK;

/* Free the client and its connections. Every request, watch, informer and
 * elector using it must have ended. NULL is a no-op. */
void egpu_kube_free(struct egpu_kube *kc);

/* The config's namespace (borrowed, valid for the client's life). */
const char *egpu_kube_namespace(const struct egpu_kube *kc);

/* Counters of a client since egpu_kube_new, for metrics and tests. */
struct egpu_kube_stats {
    unsigned long requests;    /* HTTP exchanges attempted (watches and retries included) */
    unsigned long connections; /* TCP connections opened; far fewer with keep-alive */
};

/* Copy the client's counters into *out. */
void egpu_kube_stats(struct egpu_kube *kc, struct egpu_kube_stats *out);

/* Append the URL path of res (namespace ns, object name, subresource sub;
 * NULL name = the collection, NULL sub = the object itself) to b, each
 * segment percent-encoded. Returns 0, -EINVAL (namespaced resource without
 * ns, empty name, sub without name) or what egpu_buf_append returns. */
int egpu_kube_path(struct egpu_buf *b, const struct egpu_kube_resource *res, const char *ns,
                   const char *name, const char *sub) EGPU_MUST_CHECK;

/* One request: method ("GET", "POST", ...) on path (from the server root,
 * with its query string), with an optional body of body_len bytes sent as
 * content_type (NULL = application/json). A 2xx reply is parsed as JSON into
 * *out (new reference; out may be NULL to drop it); a reply above max bytes
 * fails with -EMSGSIZE. Other replies are failures as described at the top.
 * 429 is retried (Retry-After honoured, at most 3 tries, 10 s each). */
int egpu_kube_request(struct egpu_kube *kc, const char *method, const char *path,
                      const char *content_type, const char *body, size_t body_len, size_t max,
                      json_t **out, struct egpu_kube_status *st,
                      struct egpu_error *err) EGPU_MUST_CHECK;

/* GET one object. *out: the object (new reference). */
int egpu_kube_get(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                  const char *name, json_t **out, struct egpu_kube_status *st,
                  struct egpu_error *err) EGPU_MUST_CHECK;

/* A transform of listed or watched objects (client-go's TransformFunc): a
 * new reference to what to keep of obj (borrowed; never change it), which
 * may share obj's values or be obj itself (json_incref), or NULL when out of
 * memory (the list or the watch event then fails with -ENOMEM). The result
 * is stored and shared between threads, so it is never changed afterwards.
 * It must keep metadata.name, .namespace and .resourceVersion (an
 * informer's key and its repeat check; egpu_kube_keep always does). */
typedef json_t *(*egpu_kube_transform_cb)(void *ud, json_t *obj);

/* Called after each list page arrives and before the next is asked for.
 * page_index counts from 0 and starts again when the list restarts after a
 * 410. Return 0 to go on; a negative code ends the list with that code, a
 * positive one with -ECANCELED. page is borrowed for the call. */
typedef int (*egpu_kube_page_cb)(void *ud, unsigned page_index, const json_t *page);

struct egpu_kube_list_opts {
    const char *label_selector; /* labelSelector, or NULL */
    const char *field_selector; /* fieldSelector, or NULL */
    /* NULL = consistent read; "0" = any (may be stale), from the API server's
     * watch cache, which then ignores limit: kube-apiserver 1.36 answers the
     * whole collection in one reply (docs/scheduler.md, Scale). */
    const char *resource_version;
    unsigned limit;            /* page size, 0 = 500 */
    egpu_kube_page_cb on_page; /* or NULL */
    void *ud;                  /* for on_page */
    /* Applied to each item of a page as it arrives, before on_page and before
     * the item joins the result (so a long list is never held whole as the
     * server sent it); NULL = items as sent. See egpu_kube_transform_cb. */
    egpu_kube_transform_cb transform;
    void *transform_ud;
    /* Items are handed to on_page only: *out then has an empty "items", so
     * a long list is never held whole (the informer's relist). */
    bool drop_items;
};

/* List every object, following continue tokens page by page (limit and
 * continue query parameters). When a continue token has expired (410) the
 * list starts again from the first page, so the result is always one
 * consistent snapshot; after 3 restarts it fails with EGPU_KUBE_EEXPIRED. *out: the first page's
 * List object with the items of all pages and metadata.resourceVersion of the snapshot (new
 * reference). opts may be NULL. */
int egpu_kube_list(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                   const struct egpu_kube_list_opts *opts, json_t **out,
                   struct egpu_kube_status *st, struct egpu_error *err) EGPU_MUST_CHECK;

/* POST obj (borrowed) into the collection. *out (may be NULL): the created
 * object. 409 AlreadyExists is -EEXIST. */
int egpu_kube_create(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                     const json_t *obj, json_t **out, struct egpu_kube_status *st,
                     struct egpu_error *err) EGPU_MUST_CHECK;

/* PUT obj (borrowed) as object name. The server checks obj's
 * metadata.resourceVersion: a stale one is EGPU_KUBE_ECONFLICT with reason
 * "Conflict". *out (may be NULL): the stored object. _status PUTs the
 * status subresource. */
int egpu_kube_update(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                     const char *name, const json_t *obj, json_t **out, struct egpu_kube_status *st,
                     struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_kube_update_status(struct egpu_kube *kc, const struct egpu_kube_resource *res,
                            const char *ns, const char *name, const json_t *obj, json_t **out,
                            struct egpu_kube_status *st, struct egpu_error *err) EGPU_MUST_CHECK;

enum egpu_kube_patch_type {
    EGPU_KUBE_MERGE_PATCH,     /* application/merge-patch+json, RFC 7386 object */
    EGPU_KUBE_JSON_PATCH,      /* application/json-patch+json, RFC 6902 op array */
    EGPU_KUBE_STRATEGIC_PATCH, /* application/strategic-merge-patch+json, built-in types only */
};

/* PATCH object name with patch (borrowed) of the given type. *out (may be
 * NULL): the patched object. _status patches the status subresource. */
int egpu_kube_patch(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                    const char *name, enum egpu_kube_patch_type type, const json_t *patch,
                    json_t **out, struct egpu_kube_status *st,
                    struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_kube_patch_status(struct egpu_kube *kc, const struct egpu_kube_resource *res,
                           const char *ns, const char *name, enum egpu_kube_patch_type type,
                           const json_t *patch, json_t **out, struct egpu_kube_status *st,
                           struct egpu_error *err) EGPU_MUST_CHECK;

/* DELETE object name. */
int egpu_kube_delete(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                     const char *name, struct egpu_kube_status *st,
                     struct egpu_error *err) EGPU_MUST_CHECK;

/* Bind pod ns/name to node: POST .../pods/<name>/binding with a v1 Binding
 * (binding.json). uid (may be NULL) is a precondition; annotations (borrowed
 * object of strings, may be NULL) are merged into the pod. A pod already
 * bound is EGPU_KUBE_ECONFLICT, reason "Conflict". */
int egpu_kube_bind(struct egpu_kube *kc, const char *ns, const char *name, const char *uid,
                   const char *node, const json_t *annotations, struct egpu_kube_status *st,
                   struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* Events (src/kube/event.c)                                                */

#define EGPU_KUBE_NAME_MAX 253 /* an object name's longest (DNS subdomain) */

/* An Event about one object (core/v1 Event's involvedObject and fields).
 * Every string is borrowed for the call. */
struct egpu_kube_event {
    const char *kind;        /* involvedObject.kind, e.g. "Pod", "GPU" (required) */
    const char *api_version; /* involvedObject.apiVersion; NULL = "v1" */
    const char *involved_ns; /* the object's namespace; NULL or "" for cluster-scoped ones */
    const char *name;        /* the object's name (required) */
    const char *uid;         /* the object's uid, or NULL */
    bool warning;            /* type Warning, else Normal */
    const char *reason;      /* UpperCamelCase, e.g. "DuplicateGPU" (required) */
    const char *message;     /* one line for kubectl describe (required) */
    const char *component;   /* source.component, e.g. "egpu-scheduler" (required) */
    const char *host;        /* source.host (the node), or NULL */
};

/* POST ev as a core/v1 Event (generateName "<name>.") into the object's
 * namespace, or "default" for a cluster-scoped object. Returns 0, -EINVAL (a
 * required field NULL), -ENOMEM, or what egpu_kube_create returns. */
int egpu_kube_event_post(struct egpu_kube *kc, const struct egpu_kube_event *ev,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* Watch (src/kube/watch.c)                                                 */

enum egpu_kube_event_type {
    EGPU_KUBE_ADDED,
    EGPU_KUBE_MODIFIED,
    EGPU_KUBE_DELETED,
    EGPU_KUBE_BOOKMARK,
};

/* One watch event; object is borrowed for the call (json_incref to keep it).
 * Return 0 to go on, a positive value to end the watch (it returns 0), a
 * negative code to end it with that code. */
typedef int (*egpu_kube_watch_cb)(void *ud, enum egpu_kube_event_type type, json_t *object);

struct egpu_kube_watch_opts {
    const char *label_selector; /* or NULL */
    const char *field_selector; /* or NULL */
    int timeout_s;              /* timeoutSeconds: the server ends the watch then; 0 = 300 */
    bool no_bookmarks;          /* do not ask for BOOKMARK events */
    /* A streaming list (KEP 3157; kube-apiserver's WatchList feature, on by
     * default in 1.34 and later, off in 1.30 and 1.33 among others, which
     * answer 422 Invalid): sendInitialEvents=true&resourceVersionMatch=NotOlderThan
     * (bookmarks asked whatever no_bookmarks says). The stream starts with
     * the collection's state as ADDED events, at least as new as
     * resource_version ("" = a consistent read: as of the request), then a
     * BOOKMARK for which egpu_kube_initial_events_end is true carries the
     * resourceVersion of that state; the events after it are the watch's. */
    bool send_initial_events;
    const atomic_bool *stop;   /* or NULL; once true the watch ends within ~100 ms */
    void (*on_open)(void *ud); /* or NULL: called (with open_ud) once the server has
                                  accepted the watch (2xx headers in), before any event */
    void *open_ud;
    /* In: the resourceVersion to watch from ("" or "0": synthetic ADDED for
     * every object first). Out: the last one seen, bookmarks included, to
     * resume from. */
    char resource_version[EGPU_KUBE_RV_MAX];
    /* Or NULL: egpu_kube_keep's paths (borrowed), applied to each event's
     * object while its line is decoded, so cb gets what egpu_kube_keep
     * would give of it and what it leaves out is never built (an ERROR
     * event's Status and a BOOKMARK's object are decoded whole). */
    const char *const *keep;
    /* Out: lines of this stream skipped because they were not a watch event
     * (not JSON, no type or object, unknown type) or longer than
     * EGPU_KUBE_EVENT_MAX bytes; each is logged at warning level. */
    unsigned long skipped;
};

/* Whether a BOOKMARK event's object (borrowed) ends a streaming list's
 * initial events: its metadata.annotations has "k8s.io/initial-events-end":
 * "true" (../shared/k8s-wire/watch_initial_events_end_bookmark.jsonl). A
 * BOOKMARK's object reaches cb whole, whatever opts->keep says. False for
 * NULL or any other object. */
bool egpu_kube_initial_events_end(const json_t *object);

/* Watch res in ns (NULL = all namespaces or cluster-scoped) and call cb for
 * each event, in order, until the server ends the stream (returns 0: watch
 * again from opts->resource_version), cb stops it, or an error. An expired
 * resourceVersion (HTTP 410 or an ERROR event with code 410) returns
 * EGPU_KUBE_EEXPIRED with the Status in *st: list again. A stop flag raised
 * returns -ECANCELED. A line that is not an event is skipped and counted in
 * opts->skipped (the watch goes on past it); resourceVersion does not move
 * for it, so a watch resumed before the next event sees it again. */
int egpu_kube_watch(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                    struct egpu_kube_watch_opts *opts, egpu_kube_watch_cb cb, void *ud,
                    struct egpu_kube_status *st, struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* Transforms: what an informer keeps of an object (src/kube/transform.c)  */

/* A new object (caller json_decref()s; never change it: it shares obj's
 * values by reference) holding only obj's fields at the paths of keep, a
 * NULL-terminated list of dotted paths from the object's root:
 * "metadata.annotations" keeps that whole object, "spec.containers[].name"
 * walks every element of the array spec.containers and keeps each one's
 * name (an element that is not an object is kept whole; every element is
 * kept, so indexes stay). metadata.name, .namespace and .resourceVersion are
 * always kept; whatever no path names (metadata.managedFields among it) is
 * left out. A value that is not the object or array its path goes through
 * is kept whole, so a parser refuses it as it would have without the
 * transform. A segment is 1 to 63 bytes. obj not an object: obj itself
 * (json_incref). NULL when obj is NULL, a segment is empty or too long, or
 * out of memory. */
json_t *egpu_kube_keep(json_t *obj, const char *const *keep);

/* egpu_kube_keep as an egpu_kube_transform_cb: keep is the
 * NULL-terminated path list (const char *const *), borrowed. */
json_t *egpu_kube_keep_transform(void *keep, json_t *obj);

/* An egpu_kube_transform_cb (ud unused): obj without
 * metadata.managedFields, the rest shared; obj itself (json_incref) when it
 * has none. NULL when out of memory. */
json_t *egpu_kube_strip_managed_fields(void *ud, json_t *obj);

/* ------------------------------------------------------------------------ */
/* Informer: a list+watch cache (src/kube/informer.c)                       */

struct egpu_kube_informer;

/* Callbacks, all called on the informer's thread, one at a time, after the
 * cache holds the new state. Objects are borrowed for the call and must not
 * be changed (json_incref to keep one). Any may be NULL. */
struct egpu_kube_informer_cbs {
    void (*on_add)(void *ud, const json_t *obj);
    void (*on_update)(void *ud, const json_t *old_obj, const json_t *new_obj);
    /* obj: the last state (from the DELETED event, or the cache when the
     * deletion was found by a relist). */
    void (*on_delete)(void *ud, const json_t *obj);
    void *ud;
};

struct egpu_kube_informer_opts {
    const struct egpu_kube_resource *res; /* required; borrowed for the informer's life */
    const char *ns;                       /* NULL = all namespaces (copied) */
    const char *label_selector;           /* or NULL (copied) */
    const char *field_selector;           /* or NULL (copied) */
    unsigned page_limit;                  /* list page size, 0 = 500 */
    int watch_timeout_s;                  /* 0 = random 300..600 s, as client-go */
    long backoff_min_ms;                  /* first retry delay after a failure, 0 = 500 */
    long backoff_max_ms;                  /* longest retry delay, 0 = 30000 */
    /* What is stored of each object listed or watched, before the store and
     * the callbacks see it (so old_obj, on_delete's obj and _get/_list give
     * the transformed object too); NULL = the object as the server sent it.
     * Called on the informer's thread; transform_ud is borrowed for the
     * informer's life. Listed pages are transformed as each arrives (and
     * egpu_kube_keep_transform while each is decoded). */
    egpu_kube_transform_cb transform;
    void *transform_ud;
    /* Store only each object's metadata.name, .namespace and
     * .resourceVersion (egpu_kube_keep with no paths), not the object: the
     * callbacks still get each new object whole (as transformed), but
     * on_update's old_obj, on_delete's obj when a relist finds the
     * deletion, and _get/_list give those three fields alone (and
     * store_field's value), each a new object made from the store's entry
     * (some 80 bytes a pod) when asked. For handlers that read only the new
     * object (the scheduler's pods and nodes) or one field of the old (its
     * GPU objects' spec.nodeName). */
    bool store_keys_only;
    /* With store_keys_only: the dotted path of one string field kept too
     * ("spec.nodeName"), there in old_obj and _get/_list's objects when the
     * stored object had a string there of under 4 KiB (copied); NULL = none.
     * Ignored without store_keys_only. */
    const char *store_field;
    /* List by a streaming watch instead of pages (KEP 3157, client-go's
     * WatchListClient): egpu_kube_watch with send_initial_events, each
     * initial ADDED event stored and delivered as a listed item, the
     * initial-events-end bookmark the list's end (its deletes, then synced,
     * at the bookmark's resourceVersion), and the same stream then goes on
     * as the watch. kube-apiserver sends each object once from its watch
     * cache, with no pages to cut and resume: for 160,000 GPU objects 10.7 s
     * of its CPU against 72.3 s in pages of 500 (docs/scheduler.md,
     * "Streaming lists"). A server that refuses it (HTTP 422 or 400: the
     * WatchList gate off, as in 1.30 and 1.33 by default) is listed in pages
     * from then on; a stream that ends before its bookmark is a failed list
     * (backed off). */
    bool stream_list;
};

/* Counters, for tests and metrics. */
struct egpu_kube_informer_stats {
    unsigned long lists;   /* complete lists (the first one included) */
    unsigned long watches; /* watch requests started */
    unsigned long expired; /* 410s that forced a relist */
    unsigned long errors;  /* failed lists or watches (then backed off) */
    unsigned long skipped; /* objects left out: watch lines that were no event, and
                              objects (listed or watched) without a usable
                              metadata.name; each logged */
};

/* A stopped informer for opts (copied) calling cbs (copied). Returns 0,
 * -EINVAL (no resource) or -ENOMEM. The client must outlive the informer. */
int egpu_kube_informer_new(struct egpu_kube *kc, const struct egpu_kube_informer_opts *opts,
                           const struct egpu_kube_informer_cbs *cbs,
                           struct egpu_kube_informer **out, struct egpu_error *err) EGPU_MUST_CHECK;

/* Start the informer's thread: list (paged, page_limit a page, without a
 * resourceVersion: a consistent list, which kube-apiserver serves from its
 * watch cache; "0" would come in one reply whatever the limit; or streamed,
 * opts.stream_list, the watch then going on in the same stream), then watch
 * from the list's resourceVersion, resuming from the last resourceVersion seen (bookmarks
 * included) after a stream ends or breaks, and listing again on 410, when
 * the differences from the cache become add/update/delete callbacks. A
 * list's adds and updates are made page by page as the pages arrive (the
 * list is never held whole), its deletes after the last page; a list that
 * fails part way leaves the pages it had in the store, and the next list
 * completes the picture. So each
 * change is reported once: never missed, never repeated. Failures are
 * retried with exponential backoff (backoff_min_ms doubling to
 * backoff_max_ms, with jitter). Returns 0, -EALREADY or -errno of
 * pthread_create. */
int egpu_kube_informer_start(struct egpu_kube_informer *inf,
                             struct egpu_error *err) EGPU_MUST_CHECK;

/* True once the first list has been stored and its callbacks made. */
bool egpu_kube_informer_has_synced(struct egpu_kube_informer *inf);

/* Wait up to timeout_ms for has_synced. Returns 0 or -ETIMEDOUT. */
int egpu_kube_informer_wait_synced(struct egpu_kube_informer *inf, long timeout_ms) EGPU_MUST_CHECK;

/* The cached object ns/name (ns NULL or "" for cluster-scoped), as a new
 * reference the caller json_decref()s and must not change; NULL if absent.
 * Cached objects are shared between threads by reference (jansson's
 * reference counts are atomic) and are never modified once stored (with
 * store_keys_only each call makes a new object of the stored fields; NULL
 * also when out of memory). */
json_t *egpu_kube_informer_get(struct egpu_kube_informer *inf, const char *ns, const char *name);

/* A new JSON array (caller json_decref()s) of every cached object, or NULL
 * when out of memory. */
json_t *egpu_kube_informer_list(struct egpu_kube_informer *inf);

/* Copy the informer's counters into *out. */
void egpu_kube_informer_stats(struct egpu_kube_informer *inf, struct egpu_kube_informer_stats *out);

/* How long the informer has been unhealthy, in milliseconds (CLOCK_MONOTONIC):
 * since the first of an unbroken run of failed lists and watches (a watch that
 * ended at once without an event counts as failed), or since it was started
 * when no list has succeeded yet; 0 while healthy (the last list succeeded
 * and the last watch did not fail, or a watch the server accepted has been
 * open for a second), when not started, or inf NULL. A component's
 * /readyz compares it with a bound, so a watch that keeps failing makes it
 * not ready instead of serving from a cache that no longer follows the API. */
long egpu_kube_informer_unhealthy_ms(struct egpu_kube_informer *inf);

/* The watch half of a component's /readyz over its n informers: false when
 * informer i has been unhealthy (egpu_kube_informer_unhealthy_ms) for longer
 * than max_ms (--watch-unhealthy-seconds), with "the list and watch of
 * <kinds[i]> objects has failed for <s> s" in why (a C string of at most len
 * bytes); else true, why untouched. kinds[i] names informer i's kind
 * ("GPU"). Thread-safe, as egpu_kube_informer_unhealthy_ms. */
bool egpu_kube_informers_healthy(struct egpu_kube_informer *const *inf, const char *const *kinds,
                                 size_t n, long max_ms, char *why, size_t len);

/* Stop the thread and wait for it; no callback runs after this returns. The
 * cache keeps its contents. No-op when not running. */
void egpu_kube_informer_stop(struct egpu_kube_informer *inf);

/* Stop if running and free everything. NULL is a no-op. */
void egpu_kube_informer_free(struct egpu_kube_informer *inf);

/* ------------------------------------------------------------------------ */
/* Leader election on a coordination.k8s.io/v1 Lease (src/kube/lease.c)     */

struct egpu_kube_elector;

/* The callbacks run on the elector's thread and must return promptly: the
 * next renewal waits for them. */
struct egpu_kube_elector_config {
    const char *ns;         /* the Lease's namespace (copied) */
    const char *name;       /* the Lease's name (copied) */
    const char *identity;   /* NULL = "<hostname>_<random UUID>" (copied) */
    long lease_duration_ms; /* how long a lease is trusted after it was seen to change; 0 = 15000 */
    long renew_deadline_ms; /* a leader gives up after failing to renew this long; 0 = 10000 */
    long retry_period_ms;   /* between tries (jittered x1.2 while acquiring); 0 = 2000 */
    bool release_on_cancel; /* on stop, give the Lease up so another takes over in ~1 s */
    void (*on_started_leading)(void *ud);            /* may be NULL */
    void (*on_stopped_leading)(void *ud);            /* may be NULL */
    void (*on_new_leader)(void *ud, const char *id); /* holder changed; id "" = none; may be NULL */
    void *ud;
};

/* Check cfg as client-go's NewLeaderElector does: all durations > 0 (after
 * defaults), LeaseDuration > RenewDeadline > 1.2 * RetryPeriod, ns and name
 * set. Returns 0 or -EINVAL with client-go's text ("leaseDuration must be
 * greater than renewDeadline", "renewDeadline must be greater than
 * retryPeriod*JitterFactor"). */
int egpu_kube_elector_validate(const struct egpu_kube_elector_config *cfg,
                               struct egpu_error *err) EGPU_MUST_CHECK;

/* A stopped elector (cfg copied, validated). Returns 0, -EINVAL or -ENOMEM. */
int egpu_kube_elector_new(struct egpu_kube *kc, const struct egpu_kube_elector_config *cfg,
                          struct egpu_kube_elector **out, struct egpu_error *err) EGPU_MUST_CHECK;

/* Start campaigning on the elector's thread: try to acquire every retry
 * period (jittered) until leader, call on_started_leading, renew every retry
 * period; a leader that cannot renew for renew_deadline_ms stops leading
 * (on_stopped_leading) and campaigns again. Returns 0, -EALREADY or -errno. */
int egpu_kube_elector_start(struct egpu_kube_elector *el, struct egpu_error *err) EGPU_MUST_CHECK;

/* True while this elector holds the Lease. */
bool egpu_kube_elector_is_leader(struct egpu_kube_elector *el);

/* This elector's identity (borrowed, valid for its life). */
const char *egpu_kube_elector_identity(const struct egpu_kube_elector *el);

/* Stop campaigning and wait for the thread. A leader releases the Lease
 * first when release_on_cancel is set, then on_stopped_leading runs. Without
 * release the Lease simply expires, as when a process dies. */
void egpu_kube_elector_stop(struct egpu_kube_elector *el);

/* Stop if running and free. NULL is a no-op. */
void egpu_kube_elector_free(struct egpu_kube_elector *el);

/* The allocator hooks for yajl_alloc / yajl_gen_alloc of every yajl parser
 * and generator here, by value (yajl copies them into its handle): malloc,
 * realloc and free, with an allocation failure logged and the process
 * aborted, since yajl writes to a block before it could see NULL
 * (src/kube/yajl_alloc.c). */
yajl_alloc_funcs egpu_kube_yajl_alloc(void);

#ifdef __cplusplus
}
#endif

#endif /* EGPU_KUBE_H */
