/* webhook/selfsigned.c - --self-signed: egpu-webhook makes, keeps and
 * renews its own serving certificate, without cert-manager or certs.sh.
 *
 * The API server is the one source of truth, so any number of replicas
 * agree. Each pass (at start, then every --self-signed-check-interval):
 *   1. GET the Secret (ca.crt, ca.key, tls.crt, tls.key). Absent: make a CA
 *      and a serving certificate and POST it; 409 AlreadyExists means
 *      another replica won, so read theirs. Present: use it, unless the CA
 *      or the serving certificate is within --self-signed-renew-before of
 *      its end (or unusable); then make the new one(s) and PUT with the
 *      resourceVersion read, and on 409 Conflict read the winner's. So
 *      there is never a second CA: each replica uses what the Secret holds.
 *      A serving certificate is renewed under the same CA; a CA renewal
 *      makes both, and ca.crt holds the new CA and the old one while the old
 *      one is valid, so replicas still serving the old pair keep verifying.
 *   2. Each webhook of the Mutating- and ValidatingWebhookConfiguration
 *      whose clientConfig.caBundle is not base64(ca.crt) is patched
 *      (strategic merge patch: webhooks merge by name), whoever changed it.
 *   3. tls.crt and tls.key are written to the files --tls-cert and
 *      --tls-key name when they differ from what is there: a temporary file
 *      in the same private directory (made 0700 if missing; refused when
 *      another user owns it or others may use it), O_CREAT|O_EXCL|O_NOFOLLOW,
 *      mode 0600, fsync, renameat over the old one. src/net/http.c sees the
 *      new inode at the next TLS connection and serves the new pair to new
 *      connections; open ones keep their session.
 *
 * Threads: egpu__webhook_selfsigned_new runs the first pass on the caller's
 * thread (before the HTTPS server reads the files); later passes run on one
 * thread of this file. A failed later pass is logged as a warning and tried
 * again at the next interval, the files in service staying as they are.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include "egpu/kube.h"
#include "egpu/log.h"
#include "webhook_int.h"

#define SECRET_TRIES 5 /* conflicts in a row before a pass gives up */
#define CA_CN        "egpu-webhook-ca"

static const struct egpu_kube_resource secrets = {"", "v1", "secrets", true};
static const struct egpu_kube_resource mutating = {"admissionregistration.k8s.io", "v1",
                                                   "mutatingwebhookconfigurations", false};
static const struct egpu_kube_resource validating = {"admissionregistration.k8s.io", "v1",
                                                     "validatingwebhookconfigurations", false};

/* The Secret's keys, in struct egpu__webhook_pki's order. */
static const char *const data_keys[4] = {"ca.crt", "ca.key", "tls.crt", "tls.key"};

struct egpu__webhook_selfsigned {
    struct egpu__webhook_ss_options o;
    char ns[EGPU_KUBE_NAME_MAX + 1];
    char names[EGPU_WEBHOOK_SS_NAMES][EGPU_WEBHOOK_SS_NAME_MAX];
    struct egpu_kube *kc;
    int dirfd;                     /* the directory of the served files */
    char dir[PATH_MAX];            /* its path, for messages */
    char cert_base[NAME_MAX + 1];  /* --tls-cert's file name in dir */
    char key_base[NAME_MAX + 1];   /* --tls-key's */
    char *served_crt, *served_key; /* what those files hold now */
    pthread_t thread;
    bool started;
    pthread_mutex_t lock; /* guards stop */
    pthread_cond_t wake;
    bool stop;
};

static char **pki_field(struct egpu__webhook_pki *p, int i)
{
    char **f[4] = {&p->ca_crt, &p->ca_key, &p->tls_crt, &p->tls_key};

    return f[i];
}

/* The Secret's data into *p (fields absent or not base64 stay NULL). */
static int pki_from_secret(const json_t *sec, struct egpu__webhook_pki *p)
{
    const json_t *data = json_object_get(sec, "data");

    for (int i = 0; i < 4; i++) {
        const char *b64 = egpu_kube_str(json_object_get(data, data_keys[i]));
        size_t len;
        int rc;

        if (b64 == NULL)
            continue;
        rc = egpu__webhook_b64_decode(b64, pki_field(p, i), &len);
        if (rc == -ENOMEM)
            return rc;
        if (rc == 0 && strlen(*pki_field(p, i)) != len) { /* a NUL inside: not PEM */
            egpu_free(*pki_field(p, i));
            *pki_field(p, i) = NULL;
        }
    }
    return 0;
}

/* Set sec's data to p's texts, base64. */
static int pki_to_secret(struct egpu__webhook_pki *p, json_t *sec)
{
    json_t *data = json_object();

    if (data == NULL || json_object_set_new(sec, "data", data) != 0)
        return -ENOMEM;
    for (int i = 0; i < 4; i++) {
        char *b64;
        int rc = egpu__webhook_b64_encode(*pki_field(p, i), strlen(*pki_field(p, i)), &b64);

        if (rc)
            return rc;
        rc = json_object_set_new(data, data_keys[i], json_string(b64));
        egpu_free(b64);
        if (rc != 0)
            return -ENOMEM;
    }
    return 0;
}

static json_t *new_secret(const struct egpu__webhook_selfsigned *s)
{
    return json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}}, s:s}", "apiVersion", "v1", "kind",
                     "Secret", "metadata", "name", s->o.secret, "namespace", s->ns, "labels",
                     "app.kubernetes.io/name", "egpu-webhook", "app.kubernetes.io/managed-by",
                     "egpu-webhook", "type", "kubernetes.io/tls");
}

enum renew { RENEW_NONE, RENEW_TLS, RENEW_CA, RENEW_ALL };

/* What p needs at now: nothing, a serving certificate, a CA (and so a
 * serving certificate), or everything (p unusable). */
static enum renew what_to_renew(struct egpu__webhook_selfsigned *s,
                                const struct egpu__webhook_pki *p, int64_t now, char *why,
                                size_t len)
{
    struct egpu__webhook_pki_info info;
    struct egpu_error cerr = {0};

    if (egpu__webhook_pki_check(p, (const char(*)[EGPU_WEBHOOK_SS_NAME_MAX])s->names,
                                EGPU_WEBHOOK_SS_NAMES, &info, &cerr)) {
        snprintf(why, len, "unusable: %.200s", cerr.msg);
        return RENEW_ALL;
    }
    if (egpu__webhook_ss_is_due(info.ca_not_after_s, now, s->o.renew_before_s)) {
        snprintf(why, len, "the CA ends at %lld", (long long)info.ca_not_after_s);
        return RENEW_CA;
    }
    if (egpu__webhook_ss_is_due(info.tls_not_after_s, now, s->o.renew_before_s)) {
        snprintf(why, len, "the serving certificate ends at %lld", (long long)info.tls_not_after_s);
        return RENEW_TLS;
    }
    if (!info.tls_matches) {
        snprintf(why, len, "the serving certificate is not of the CA or not for %s", s->names[2]);
        return RENEW_TLS;
    }
    return RENEW_NONE;
}

static int renew(struct egpu__webhook_selfsigned *s, struct egpu__webhook_pki *p, enum renew what,
                 int64_t now, struct egpu_error *err)
{
    int rc = 0;

    if (what == RENEW_ALL) {
        egpu__webhook_pki_clear(p);
        rc = egpu__webhook_pki_new_ca(CA_CN, now, s->o.ca_validity_s, p, err);
    } else if (what == RENEW_CA) {
        char *old = p->ca_crt, *bundle = NULL;

        p->ca_crt = NULL;
        rc = egpu__webhook_pki_new_ca(CA_CN, now, s->o.ca_validity_s, p, err);
        if (!rc)
            rc = egpu__webhook_pki_bundle_join(p->ca_crt, old, now, &bundle, err);
        if (!rc) {
            egpu_free(p->ca_crt);
            p->ca_crt = bundle;
        }
        if (rc && p->ca_crt == NULL)
            p->ca_crt = old;
        else
            egpu_free(old);
    }
    if (!rc)
        rc = egpu__webhook_pki_new_leaf(p, (const char(*)[EGPU_WEBHOOK_SS_NAME_MAX])s->names,
                                        EGPU_WEBHOOK_SS_NAMES, now, s->o.cert_validity_s, err);
    return rc;
}

/* Step 1: the Secret's PKI into *p, made or renewed as needed. */
static int secret_sync(struct egpu__webhook_selfsigned *s, int64_t now, struct egpu__webhook_pki *p,
                       struct egpu_error *err)
{
    static const char *const what_name[] = {"none", "serving certificate", "CA", "all"};

    for (int tries = 0; tries < SECRET_TRIES; tries++) {
        json_t *sec = NULL;
        enum renew what;
        char why[EGPU_ERRMSG_MAX];
        int rc;

        egpu__webhook_pki_clear(p);
        rc = egpu_kube_get(s->kc, &secrets, s->ns, s->o.secret, &sec, NULL, err);
        if (rc == -ENOENT) {
            rc = renew(s, p, RENEW_ALL, now, err);
            sec = rc ? NULL : new_secret(s);
            if (!rc && sec == NULL)
                rc = -ENOMEM;
            if (!rc)
                rc = pki_to_secret(p, sec);
            if (!rc)
                rc = egpu_kube_create(s->kc, &secrets, s->ns, sec, NULL, NULL, err);
            json_decref(sec);
            if (rc == -EEXIST) { /* another replica made it first: use theirs */
                egpu_log(EGPU_LOG_NOTICE, "self-signed secret=%s/%s created by another replica",
                         s->ns, s->o.secret);
                continue;
            }
            if (!rc)
                egpu_log(EGPU_LOG_NOTICE, "self-signed secret=%s/%s created (new CA)", s->ns,
                         s->o.secret);
            return rc;
        }
        if (rc)
            return rc;
        rc = pki_from_secret(sec, p);
        what = rc ? RENEW_NONE : what_to_renew(s, p, now, why, sizeof(why));
        if (!rc && what != RENEW_NONE)
            rc = renew(s, p, what, now, err);
        if (!rc && what != RENEW_NONE)
            rc = pki_to_secret(p, sec); /* metadata.resourceVersion read is the precondition */
        if (!rc && what != RENEW_NONE)
            rc = egpu_kube_update(s->kc, &secrets, s->ns, s->o.secret, sec, NULL, NULL, err);
        json_decref(sec);
        if (rc == EGPU_KUBE_ECONFLICT) { /* another replica renewed it: use theirs */
            egpu_log(EGPU_LOG_NOTICE, "self-signed secret=%s/%s renewed by another replica", s->ns,
                     s->o.secret);
            continue;
        }
        if (!rc && what != RENEW_NONE)
            egpu_log(EGPU_LOG_NOTICE, "self-signed secret=%s/%s renewed=\"%s\" reason=\"%s\"",
                     s->ns, s->o.secret, what_name[what], why);
        return rc;
    }
    return egpu_error_set(err, -EAGAIN, "Secret %s/%s: changed by others %d times in a row", s->ns,
                          s->o.secret, SECRET_TRIES);
}

/* Step 2, for one configuration: every webhook's caBundle to want. A
 * configuration that does not exist (yet) is logged, not an error. */
static int ca_bundle_sync(struct egpu__webhook_selfsigned *s, const struct egpu_kube_resource *res,
                          const char *want, struct egpu_error *err)
{
    json_t *cfg = NULL, *patch, *list;
    const json_t *w;
    size_t i;
    int rc;

    rc = egpu_kube_get(s->kc, res, NULL, s->o.configuration, &cfg, NULL, err);
    if (rc == -ENOENT) {
        egpu_log(EGPU_LOG_WARN, "self-signed %s/%s not found: caBundle not set", res->plural,
                 s->o.configuration);
        return 0;
    }
    if (rc)
        return rc;
    list = json_array();
    patch = json_pack("{s:o}", "webhooks", list);
    if (patch == NULL) {
        json_decref(cfg);
        return -ENOMEM;
    }
    json_array_foreach(json_object_get(cfg, "webhooks"), i, w)
    {
        const char *name = egpu_kube_str(json_object_get(w, "name"));
        const char *have =
            egpu_kube_str(json_object_get(json_object_get(w, "clientConfig"), "caBundle"));

        if (name == NULL || (have != NULL && strcmp(have, want) == 0))
            continue;
        if (json_array_append_new(list, json_pack("{s:s, s:{s:s}}", "name", name, "clientConfig",
                                                  "caBundle", want)) != 0)
            rc = -ENOMEM;
    }
    json_decref(cfg);
    if (!rc && json_array_size(list) > 0) {
        rc = egpu_kube_patch(s->kc, res, NULL, s->o.configuration, EGPU_KUBE_STRATEGIC_PATCH, patch,
                             NULL, NULL, err);
        if (!rc)
            egpu_log(EGPU_LOG_NOTICE, "self-signed caBundle set %s/%s webhooks=%zu", res->plural,
                     s->o.configuration, json_array_size(list));
    }
    json_decref(patch);
    return rc;
}

/* Write text to a new file in s's directory; its name into tmp. */
static int write_tmp(struct egpu__webhook_selfsigned *s, const char *base, const char *text,
                     char *tmp, size_t len, struct egpu_error *err)
{
    unsigned char rnd[8];
    size_t n = strlen(text), off = 0;
    int fd;

    if (gnutls_rnd(GNUTLS_RND_NONCE, rnd, sizeof(rnd)) < 0)
        return egpu_error_set(err, -EIO, "random name for %s", base);
    snprintf(tmp, len, ".%s.%02x%02x%02x%02x%02x%02x%02x%02x", base, rnd[0], rnd[1], rnd[2], rnd[3],
             rnd[4], rnd[5], rnd[6], rnd[7]);
    fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return egpu_error_errno(err, "create %s/%s", s->dir, tmp);
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            break;
        off += (size_t)w;
    }
    if (off < n || fsync(fd) != 0) {
        int e = errno;

        (void)close(fd);
        (void)unlinkat(s->dirfd, tmp, 0); /* nothing points at it yet */
        return egpu_error_set(err, -e, "write %s/%s: %s", s->dir, tmp, strerror(e));
    }
    if (close(fd) != 0) {
        int e = errno;

        (void)unlinkat(s->dirfd, tmp, 0); /* as above */
        return egpu_error_set(err, -e, "close %s/%s: %s", s->dir, tmp, strerror(e));
    }
    return 0;
}

/* Step 3: the files, when they differ from p. */
static int files_sync(struct egpu__webhook_selfsigned *s, const struct egpu__webhook_pki *p,
                      struct egpu_error *err)
{
    char tmp_key[NAME_MAX + 1], tmp_crt[NAME_MAX + 1];
    char *crt, *key;
    int rc;

    if (s->served_crt != NULL && strcmp(s->served_crt, p->tls_crt) == 0 &&
        strcmp(s->served_key, p->tls_key) == 0)
        return 0;
    crt = egpu_strdup(p->tls_crt);
    key = egpu_strdup(p->tls_key);
    if (crt == NULL || key == NULL) {
        egpu_free(crt);
        egpu_free(key);
        return egpu_error_set(err, -ENOMEM, "out of memory");
    }
    rc = write_tmp(s, s->key_base, p->tls_key, tmp_key, sizeof(tmp_key), err);
    if (!rc) {
        rc = write_tmp(s, s->cert_base, p->tls_crt, tmp_crt, sizeof(tmp_crt), err);
        if (rc)
            (void)unlinkat(s->dirfd, tmp_key, 0); /* never renamed: ours alone */
    }
    /* Key first, then certificate, one right after the other: the server
     * looks at most once a second and keeps the old pair if it ever reads a
     * key without its certificate. */
    if (!rc && renameat(s->dirfd, tmp_key, s->dirfd, s->key_base) != 0) {
        rc = egpu_error_errno(err, "rename %s/%s", s->dir, s->key_base);
        (void)unlinkat(s->dirfd, tmp_key, 0); /* the rename failed: still a stray */
        (void)unlinkat(s->dirfd, tmp_crt, 0); /* as above */
    }
    if (!rc && renameat(s->dirfd, tmp_crt, s->dirfd, s->cert_base) != 0) {
        rc = egpu_error_errno(err, "rename %s/%s", s->dir, s->cert_base);
        (void)unlinkat(s->dirfd, tmp_crt, 0); /* as above */
    }
    if (rc) {
        egpu_free(crt);
        egpu_free(key);
        return rc;
    }
    egpu_free(s->served_crt);
    egpu_free(s->served_key);
    s->served_crt = crt;
    s->served_key = key;
    egpu_log(EGPU_LOG_NOTICE, "self-signed serving files written cert=%s/%s key=%s/%s", s->dir,
             s->cert_base, s->dir, s->key_base);
    return 0;
}

/* One pass: steps 1, 2 and 3. caBundle failures are logged (the next pass
 * tries again) and do not stop the files from being written. */
static int sync_once(struct egpu__webhook_selfsigned *s, struct egpu_error *err)
{
    const struct egpu_kube_resource *cfgs[2] = {&mutating, &validating};
    struct egpu__webhook_pki p = {0};
    char *want = NULL;
    int rc;

    rc = secret_sync(s, (int64_t)time(NULL), &p, err);
    if (!rc)
        rc = egpu__webhook_b64_encode(p.ca_crt, strlen(p.ca_crt), &want);
    for (int i = 0; !rc && i < 2; i++) {
        struct egpu_error cerr = {0};

        if (ca_bundle_sync(s, cfgs[i], want, &cerr) != 0)
            egpu_log(EGPU_LOG_WARN, "self-signed caBundle of %s/%s not set error=\"%s\"",
                     cfgs[i]->plural, s->o.configuration, cerr.msg);
    }
    if (!rc)
        rc = files_sync(s, &p, err);
    egpu_free(want);
    egpu__webhook_pki_clear(&p);
    return rc;
}

/* dir of path into dir (len bytes) and its last segment into base. */
static int split_path(const char *path, char *dir, size_t len, char *base, size_t blen)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash == NULL ? 1 : (size_t)(slash - path);

    if (slash == NULL)
        snprintf(dir, len, ".");
    else if (n == 0)
        snprintf(dir, len, "/");
    else if (n >= len)
        return -ENAMETOOLONG;
    else
        snprintf(dir, len, "%.*s", (int)n, path);
    path = slash == NULL ? path : slash + 1;
    if (path[0] == '\0' || strlen(path) >= blen)
        return -EINVAL;
    snprintf(base, blen, "%s", path);
    return 0;
}

/* Open (making it 0700 when missing) the directory of the files, and
 * refuse one another user owns or others may read or write. */
static int open_dir(struct egpu__webhook_selfsigned *s, const char *cert_file, const char *key_file,
                    struct egpu_error *err)
{
    char kdir[PATH_MAX];
    struct stat st;

    if (split_path(cert_file, s->dir, sizeof(s->dir), s->cert_base, sizeof(s->cert_base)) ||
        split_path(key_file, kdir, sizeof(kdir), s->key_base, sizeof(s->key_base)))
        return egpu_error_set(err, -EINVAL, "--tls-cert %s, --tls-key %s: bad file names",
                              cert_file, key_file);
    if (strcmp(s->dir, kdir) != 0 || strcmp(s->cert_base, s->key_base) == 0)
        return egpu_error_set(err, -EINVAL,
                              "--self-signed: --tls-cert and --tls-key must be two files of one "
                              "directory (%s, %s)",
                              cert_file, key_file);
    if (mkdir(s->dir, 0700) != 0 && errno != EEXIST)
        return egpu_error_errno(err, "mkdir %s", s->dir);
    s->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (s->dirfd < 0)
        return egpu_error_errno(err, "open %s", s->dir);
    if (fstat(s->dirfd, &st) != 0)
        return egpu_error_errno(err, "stat %s", s->dir);
    if (st.st_uid != geteuid() || (st.st_mode & 077) != 0)
        return egpu_error_set(err, -EPERM,
                              "directory %s: owner uid %u, mode %03o; --self-signed writes its "
                              "key only into a directory of its own user (uid %u) with mode "
                              "0700 (it makes one when missing)",
                              s->dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777),
                              (unsigned)geteuid());
    return 0;
}

int egpu__webhook_selfsigned_new(const struct egpu__webhook_ss_options *o, struct egpu_kube *kc,
                                 const char *cert_file, const char *key_file,
                                 struct egpu__webhook_selfsigned **out, struct egpu_error *err)
{
    struct egpu__webhook_selfsigned *s = egpu_calloc(1, sizeof(*s));
    const char *ns = o->ns != NULL ? o->ns : egpu_kube_namespace(kc);
    int rc;

    if (s == NULL)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    s->o = *o;
    s->kc = kc;
    s->dirfd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    if (ns == NULL || ns[0] == '\0' || strlen(ns) >= sizeof(s->ns)) {
        egpu__webhook_selfsigned_free(s);
        return egpu_error_set(err, -EINVAL,
                              "--self-signed: no namespace (--self-signed-namespace)");
    }
    snprintf(s->ns, sizeof(s->ns), "%s", ns);
    rc = egpu__webhook_ss_dns_names(o->service, s->ns, s->names);
    if (rc)
        rc = egpu_error_set(err, rc, "--self-signed-service %s: %s", o->service, egpu_strerror(rc));
    if (!rc)
        rc = open_dir(s, cert_file, key_file, err);
    if (!rc)
        rc = sync_once(s, err);
    if (rc) {
        egpu__webhook_selfsigned_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

static void *run(void *data)
{
    struct egpu__webhook_selfsigned *s = data;
    struct timespec due;

    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        clock_gettime(CLOCK_MONOTONIC, &due);
        due.tv_sec += (time_t)s->o.check_s;
        while (!s->stop && pthread_cond_timedwait(&s->wake, &s->lock, &due) != ETIMEDOUT)
            ;
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->lock);
        {
            struct egpu_error err = {0};

            if (sync_once(s, &err) != 0)
                egpu_log(EGPU_LOG_WARN,
                         "self-signed pass failed error=\"%s\"; the files in "
                         "service stay, next try in %llds",
                         err.msg, (long long)s->o.check_s);
        }
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

int egpu__webhook_selfsigned_start(struct egpu__webhook_selfsigned *s, struct egpu_error *err)
{
    pthread_condattr_t ca;
    int rc;

    /* the wait is on CLOCK_MONOTONIC: a clock step neither fires nor delays it */
    pthread_cond_destroy(&s->wake);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &ca);
    pthread_condattr_destroy(&ca);
    rc = pthread_create(&s->thread, NULL, run, s);
    if (rc)
        return egpu_error_set(err, -rc, "self-signed thread: %s", strerror(rc));
    s->started = true;
    return 0;
}

void egpu__webhook_selfsigned_free(struct egpu__webhook_selfsigned *s)
{
    if (s == NULL)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->lock);
        s->stop = true;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
    }
    if (s->dirfd >= 0)
        (void)close(s->dirfd); /* read-only directory handle: nothing to flush */
    egpu_free(s->served_crt);
    egpu_free(s->served_key);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    egpu_free(s);
}
