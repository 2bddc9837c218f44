/* agent/dra_registration.c - the kubelet plugin registration of the DRA
 * kubelet plugin: pluginregistration.Registration served on
 * <registry dir>/<driver>-reg.sock (dra_registration_int.h).
 *
 * The kubelet's plugin watcher sees the socket appear, calls GetInfo and
 * then NotifyRegistrationStatus; deleting the socket deregisters the plugin
 * (shared/k8s-wire/dra/kubelet_plugin_notes.md, sections 1 and 2). The
 * socket is served by the project's gRPC server (src/net/grpc_server.c),
 * as the device plugin's (plugin.c): it replaces only a stale socket file,
 * never another kind of file, and on stop removes the socket only if it is
 * still the one it made. Before it binds, the registry dir is opened with
 * O_NOFOLLOW and checked to be a directory that only this user (or root)
 * can write, so nobody else can swap the name between the server's check
 * and its bind.
 *
 * What the kubelet answered is recorded, never acted on here: on a refusal
 * the kubelet retries by itself, and the plugin keeps serving.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pluginregistration/v1/api.pb-c.h"
#include "egpu/api.h"
#include "egpu/log.h"
#include "allocdir_int.h"
#include "allocfs_int.h"
#include "dra_registration_int.h"
#include "pb_int.h"

struct egpu__dra_registration {
    char *registry_dir;
    char *driver;
    char *endpoint;
    char socket[EGPU_DRA_SOCKET_PATH_MAX + 1];
    struct egpu_grpc_server *srv;
    bool running;
    pthread_mutex_t lock; /* guards state */
    struct egpu__dra_registration_state state;
};

/* ------------------------------------------------------------------------ */
/* Handlers                                                                 */

int egpu__dra_registration_on_get_info(void *data, const struct egpu_grpc_request *req,
                                       struct egpu_buf *reply, struct egpu_grpc_status *st)
{
    static char type[] = EGPU_DRA_PLUGIN_TYPE, v1[] = EGPU_DRA_VERSION_V1,
                v1beta1[] = EGPU_DRA_VERSION_V1BETA1;
    char *versions[] = {v1, v1beta1}; /* the kubelet takes the first it knows */
    struct egpu__dra_registration *r = data;
    Pluginregistration__PluginInfo info = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
    ProtobufCMessage *in = egpu__pb_unpack(&pluginregistration__info_request__descriptor, req);
    int rc;

    if (in == NULL)
        return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                    "GetInfo: request is not an InfoRequest");
    egpu__pb_unpacked_free(in);
    info.type = type;
    info.name = r->driver;
    info.endpoint = r->endpoint;
    info.n_supported_versions = sizeof(versions) / sizeof(versions[0]);
    info.supported_versions = versions;
    rc = egpu__pb_pack(&info.base, reply);
    if (rc == 0) {
        pthread_mutex_lock(&r->lock);
        r->state.get_info_calls++;
        pthread_mutex_unlock(&r->lock);
    }
    return rc;
}

/* The kubelet's error text into out (len bytes), cut to fit, each control
 * byte made '?' so that it stays one log line. */
static void copy_text(char *out, size_t len, const char *s)
{
    size_t i = 0;

    for (; s != NULL && s[i] != '\0' && i + 1 < len; i++) {
        unsigned char c = (unsigned char)s[i];

        out[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    out[i] = '\0';
}

int egpu__dra_registration_on_notify(void *data, const struct egpu_grpc_request *req,
                                     struct egpu_buf *reply, struct egpu_grpc_status *st)
{
    struct egpu__dra_registration *r = data;
    Pluginregistration__RegistrationStatusResponse resp =
        PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
    Pluginregistration__RegistrationStatus *s =
        (Pluginregistration__RegistrationStatus *)egpu__pb_unpack(
            &pluginregistration__registration_status__descriptor, req);
    char error[EGPU_DRA_REG_ERROR_MAX];
    bool registered;

    if (s == NULL)
        return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                    "NotifyRegistrationStatus: request is not a "
                                    "RegistrationStatus");
    registered = s->plugin_registered;
    copy_text(error, sizeof(error), registered ? "" : s->error);
    egpu__pb_unpacked_free(&s->base);
    pthread_mutex_lock(&r->lock);
    r->state.notified = true;
    r->state.registered = registered;
    memcpy(r->state.error, error, sizeof(error));
    r->state.notifications++;
    r->state.refusals += !registered;
    pthread_mutex_unlock(&r->lock);
    if (!registered) {
        egpu_log(EGPU_LOG_WARN,
                 "DRA plugin registration refused by the kubelet driver=%s error=\"%s\"", r->driver,
                 error);
        return egpu_grpc_status_set(st, GRPC_STATUS_UNKNOWN, "failed registration process: %s",
                                    error);
    }
    egpu_log(EGPU_LOG_NOTICE, "DRA plugin registered with the kubelet driver=%s endpoint=%s",
             r->driver, r->endpoint);
    return egpu__pb_pack(&resp.base, reply);
}

/* ------------------------------------------------------------------------ */
/* Life cycle                                                               */

/* Is driver a valid DRA driver name: a DNS subdomain of at most 63 bytes? */
static bool is_driver_name(const char *driver)
{
    return driver != NULL && strlen(driver) <= EGPU_DRA_DRIVER_MAX &&
           egpu_api_dns_subdomain(driver);
}

int egpu__dra_registration_new(const struct egpu__dra_registration_config *cfg,
                               struct egpu__dra_registration **out, struct egpu_error *err)
{
    struct egpu__dra_registration *r;
    const char *dir = cfg->registry_dir != NULL ? cfg->registry_dir : EGPU_DRA_REGISTRY_DIR;
    int rc, n;

    if (!is_driver_name(cfg->driver))
        return egpu_error_set(err, -EINVAL,
                              "DRA driver name \"%.80s\" is not a DNS subdomain of at most %d "
                              "bytes",
                              cfg->driver != NULL ? cfg->driver : "", EGPU_DRA_DRIVER_MAX);
    if (cfg->endpoint == NULL || cfg->endpoint[0] != '/')
        return egpu_error_set(err, -EINVAL, "DRA endpoint \"%.120s\" is not an absolute path",
                              cfg->endpoint != NULL ? cfg->endpoint : "");
    if (strlen(cfg->endpoint) > EGPU_DRA_SOCKET_PATH_MAX)
        return egpu_error_set(err, -ENAMETOOLONG, "DRA endpoint %s: more than %d bytes",
                              cfg->endpoint, EGPU_DRA_SOCKET_PATH_MAX);
    if (dir[0] == '\0')
        return egpu_error_set(err, -EINVAL, "DRA plugin registry dir is empty");
    r = egpu_calloc(1, sizeof(*r));
    if (r == NULL)
        return egpu_error_set(err, -ENOMEM, "DRA registration: out of memory");
    pthread_mutex_init(&r->lock, NULL);
    r->registry_dir = egpu_strdup(dir);
    r->driver = egpu_strdup(cfg->driver);
    r->endpoint = egpu_strdup(cfg->endpoint);
    if (r->registry_dir == NULL || r->driver == NULL || r->endpoint == NULL) {
        egpu__dra_registration_free(r);
        return egpu_error_set(err, -ENOMEM, "DRA registration: out of memory");
    }
    n = snprintf(r->socket, sizeof(r->socket), "%s/%s%s", dir, cfg->driver,
                 EGPU_DRA_REG_SOCKET_SUFFIX);
    if (n < 0 || (size_t)n >= sizeof(r->socket)) {
        egpu__dra_registration_free(r);
        return egpu_error_set(err, -ENAMETOOLONG,
                              "DRA plugin registry dir %s: the registration socket's path in it "
                              "would pass %d bytes",
                              dir, EGPU_DRA_SOCKET_PATH_MAX);
    }
    rc = egpu_grpc_server_new(r->socket, 2, &r->srv, err);
    if (!rc)
        rc = egpu_grpc_server_unary(r->srv, EGPU_DRA_METHOD_GET_INFO,
                                    egpu__dra_registration_on_get_info, r);
    if (!rc)
        rc = egpu_grpc_server_unary(r->srv, EGPU_DRA_METHOD_NOTIFY,
                                    egpu__dra_registration_on_notify, r);
    if (rc) {
        if (err != NULL && err->code == 0)
            egpu_error_set(err, rc, "DRA registration: %s", egpu_strerror(rc));
        egpu__dra_registration_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void egpu__dra_registration_free(struct egpu__dra_registration *r)
{
    if (r == NULL)
        return;
    egpu_grpc_server_free(r->srv); /* stops it: no handler runs any more */
    pthread_mutex_destroy(&r->lock);
    egpu_free(r->registry_dir);
    egpu_free(r->driver);
    egpu_free(r->endpoint);
    egpu_free(r);
}

/* The registry dir, made if missing, must be a directory (not a link) that
 * only this user or root can write. Returns 0 or a negative code with err
 * set. */
static int check_registry_dir(const char *dir, struct egpu_error *err)
{
    struct stat st;
    int fd, rc;

    rc = egpu__allocdir_mkdir_p(dir);
    if (rc)
        return egpu_error_set(err, rc, "DRA plugin registry dir %s cannot be created: %s", dir,
                              egpu_strerror(rc));
    rc = egpu__fs_open_dir(AT_FDCWD, dir, &fd);
    /* Linux answers ENOTDIR, not ELOOP, for O_DIRECTORY | O_NOFOLLOW on a
     * link: say which it is. */
    if (rc == -ENOTDIR && lstat(dir, &st) == 0 && S_ISLNK(st.st_mode))
        rc = -ELOOP;
    if (rc)
        return egpu_error_set(err, rc, "DRA plugin registry dir %s: %s%s", dir, egpu_strerror(rc),
                              rc == -ELOOP ? " (a symbolic link)" : "");
    rc = fstat(fd, &st) != 0 ? -errno : 0;
    close(fd);
    if (rc)
        return egpu_error_set(err, rc, "DRA plugin registry dir %s: %s", dir, egpu_strerror(rc));
    if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return egpu_error_set(err, -EPERM,
                              "DRA plugin registry dir %s: owner %u mode %04o; it must be owned "
                              "by uid %u or root and writable by nobody else",
                              dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                              (unsigned)geteuid());
    return 0;
}

int egpu__dra_registration_serve(struct egpu__dra_registration *r, struct egpu_error *err)
{
    int rc;

    egpu__dra_registration_stop(r);
    rc = check_registry_dir(r->registry_dir, err);
    if (rc)
        return rc;
    rc = egpu_grpc_server_start(r->srv, err);
    if (rc)
        return rc;
    r->running = true;
    egpu_log(EGPU_LOG_NOTICE, "DRA plugin registration serving socket=%s driver=%s endpoint=%s",
             r->socket, r->driver, r->endpoint);
    return 0;
}

void egpu__dra_registration_stop(struct egpu__dra_registration *r)
{
    if (!r->running)
        return;
    egpu_grpc_server_stop(r->srv);
    r->running = false;
}

const char *egpu__dra_registration_socket(const struct egpu__dra_registration *r)
{
    return r->socket;
}

bool egpu__dra_registration_socket_exists(const struct egpu__dra_registration *r)
{
    struct stat st;

    return r->running && lstat(r->socket, &st) == 0 && S_ISSOCK(st.st_mode);
}

void egpu__dra_registration_state(struct egpu__dra_registration *r,
                                  struct egpu__dra_registration_state *out)
{
    pthread_mutex_lock(&r->lock);
    *out = r->state;
    pthread_mutex_unlock(&r->lock);
}
