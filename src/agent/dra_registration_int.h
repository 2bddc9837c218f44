/* agent/dra_registration_int.h - the kubelet plugin registration of the DRA
 * kubelet plugin (dra_registration.c), private to src/agent.
 *
 * In DRA mode the kubelet finds the agent through its plugin watcher: a unix
 * socket <registry dir>/<driver>-reg.sock serving pluginregistration.Registration
 * (proto/pluginregistration/v1). The kubelet calls GetInfo (1 s deadline),
 * which answers type "DRAPlugin", the driver name, the absolute path of the
 * DRAPlugin socket and the DRAPlugin versions served, preferred first
 * ("v1.DRAPlugin", "v1beta1.DRAPlugin"); then NotifyRegistrationStatus tells
 * whether the kubelet took the plugin, or why not. Wire facts:
 * shared/k8s-wire/dra/kubelet_plugin_notes.md, sections 1 and 2.
 *
 * Threads: the handlers run on the gRPC server's threads; a lock guards the
 * recorded status, which egpu__dra_registration_state reads from any thread.
 * new, serve, stop and free from one thread.
 */
#ifndef EGPU_AGENT_DRA_REGISTRATION_INT_H
#define EGPU_AGENT_DRA_REGISTRATION_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "egpu/core.h"
#include "egpu/grpc.h"

#define EGPU_DRA_REGISTRY_DIR      "/var/lib/kubelet/plugins_registry" /* the plugin watcher's */
#define EGPU_DRA_PLUGIN_TYPE       "DRAPlugin"         /* PluginInfo.type of a DRA driver */
#define EGPU_DRA_REG_SOCKET_SUFFIX "-reg.sock"         /* <driver>-reg.sock in the registry dir */
#define EGPU_DRA_VERSION_V1        "v1.DRAPlugin"      /* k8s.io.kubelet.pkg.apis.dra.v1 */
#define EGPU_DRA_VERSION_V1BETA1   "v1beta1.DRAPlugin" /* k8s.io.kubelet.pkg.apis.dra.v1beta1 */
#define EGPU_DRA_DRIVER_MAX        63  /* driver name, bytes (ResourceSlice spec.driver) */
#define EGPU_DRA_SOCKET_PATH_MAX   107 /* a unix socket path, bytes without the NUL */
#define EGPU_DRA_REG_ERROR_MAX     512 /* the kubelet's error kept, bytes incl. NUL */

#define EGPU_DRA_METHOD_GET_INFO "/pluginregistration.Registration/GetInfo"
#define EGPU_DRA_METHOD_NOTIFY   "/pluginregistration.Registration/NotifyRegistrationStatus"

/* Settings; strings are copied by egpu__dra_registration_new. */
struct egpu__dra_registration_config {
    const char *registry_dir; /* the kubelet's plugin registry; NULL: EGPU_DRA_REGISTRY_DIR */
    const char *driver;       /* driver name: a DNS subdomain of at most 63 bytes */
    const char *endpoint;     /* absolute path of the DRAPlugin socket, at most 107 bytes */
};

/* What the kubelet said, as last recorded. */
struct egpu__dra_registration_state {
    bool notified;                      /* a NotifyRegistrationStatus arrived */
    bool registered;                    /* its plugin_registered (false until one arrives) */
    char error[EGPU_DRA_REG_ERROR_MAX]; /* its error text, cut to fit; "" when registered */
    unsigned long get_info_calls;       /* GetInfo calls answered */
    unsigned long notifications;        /* NotifyRegistrationStatus calls decoded */
    unsigned long refusals;             /* NotifyRegistrationStatus with plugin_registered false */
};

struct egpu__dra_registration; /* opaque */

/* Make the registration service (not serving yet) for cfg. Checks the driver
 * name (a DNS subdomain of at most EGPU_DRA_DRIVER_MAX bytes, so the socket
 * name stays inside the registry dir and the watcher does not skip it as a
 * dot file), the endpoint (absolute, at most EGPU_DRA_SOCKET_PATH_MAX bytes)
 * and the registration socket's path (<registry dir>/<driver>-reg.sock, at
 * most EGPU_DRA_SOCKET_PATH_MAX bytes). *out (free with
 * egpu__dra_registration_free) only on success. Returns 0, -EINVAL (a bad
 * driver name or endpoint, with err saying which), -ENAMETOOLONG or
 * -ENOMEM. */
int egpu__dra_registration_new(const struct egpu__dra_registration_config *cfg,
                               struct egpu__dra_registration **out,
                               struct egpu_error *err) EGPU_MUST_CHECK;

/* Stop serving (if serving) and free r. NULL is a no-op. */
void egpu__dra_registration_free(struct egpu__dra_registration *r);

/* Create the registry dir if missing (0755, as the kubelet does), check it
 * (opened with O_NOFOLLOW: a directory, not a symbolic link, owned by this
 * process's user or root and writable by nobody else, so no other user can
 * swap the socket file) and serve Registration on the registration socket;
 * a stale socket of a crashed agent is replaced, any other file there is
 * left alone. Serving already: restarts (the kubelet wiped the dir).
 * Returns 0, -ENOTDIR, -ELOOP (a link), -EPERM (owner or mode), -EEXIST (a
 * non-socket file at the socket's name), another -errno, or what
 * egpu_grpc_server_start returns; err says which path and why. */
int egpu__dra_registration_serve(struct egpu__dra_registration *r,
                                 struct egpu_error *err) EGPU_MUST_CHECK;

/* Stop serving; the socket file is removed (if still ours), so the kubelet
 * deregisters the plugin. Not serving: a no-op. */
void egpu__dra_registration_stop(struct egpu__dra_registration *r);

/* The registration socket's path (borrowed from r). */
const char *egpu__dra_registration_socket(const struct egpu__dra_registration *r);

/* Whether r serves and its socket file is still there (the kubelet may wipe
 * the registry dir). */
bool egpu__dra_registration_socket_exists(const struct egpu__dra_registration *r);

/* Copy what was recorded into *out. */
void egpu__dra_registration_state(struct egpu__dra_registration *r,
                                  struct egpu__dra_registration_state *out);

/* The two handlers (egpu_grpc_unary_cb, data = r), callable without a server
 * (the fuzz target feeds them raw bytes). GetInfo: the request must decode
 * as InfoRequest (unknown fields are skipped), else INVALID_ARGUMENT; the
 * reply is the PluginInfo. NotifyRegistrationStatus: a request that does
 * not decode is INVALID_ARGUMENT and recorded nowhere; a decoded one is
 * recorded, and plugin_registered false is answered UNKNOWN "failed
 * registration process: <error>" (as the upstream kubeletplugin helper
 * does), true with an empty RegistrationStatusResponse. Return 0 or the
 * negative code of the status set in st (-EINVAL, -EPROTO), or -ENOMEM /
 * -EMSGSIZE when the reply does not fit. */
int egpu__dra_registration_on_get_info(void *data, const struct egpu_grpc_request *req,
                                       struct egpu_buf *reply, struct egpu_grpc_status *st);
int egpu__dra_registration_on_notify(void *data, const struct egpu_grpc_request *req,
                                     struct egpu_buf *reply, struct egpu_grpc_status *st);

#endif /* EGPU_AGENT_DRA_REGISTRATION_INT_H */
