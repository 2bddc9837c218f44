/* kube/config.c - where the API server is and how to authenticate to it.
 *
 * Three sources, as kubectl and client-go use them:
 * - kubeconfig files (clientcmd v1 Config; YAML, parsed with libyaml's
 *   document loader): clusters, users and contexts by name, current-context,
 *   certificate and key data in base64 or as files relative to the kubeconfig;
 *   a ':'-separated $KUBECONFIG list merges with "first file wins";
 * - the in-cluster service account (rest.InClusterConfig): environment for
 *   the server, files for the token, CA and namespace;
 * - an explicit URL and token (tests, tools).
 * egpu_kube_config_load picks one in kubectl's order.
 *
 * DESIGN: the token of a service account is a rotating, expiring JWT, so the
 * config records token_file and the client re-reads it when it changes;
 * nothing here caches it for the life of the process. Every string in the
 * result is owned by the config (egpu_malloc).
 */
#define _GNU_SOURCE /* explicit_bzero */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <gnutls/gnutls.h>
#include <yaml.h>

#include "egpu/log.h"
#include "kube_int.h"

#define KUBECONFIG_MAX ((size_t)16 << 20) /* bytes of one kubeconfig file */
#define SMALL_FILE_MAX ((size_t)64 << 10) /* token, namespace */
#define SA_DIR         "/var/run/secrets/kubernetes.io/serviceaccount"
#define DEFAULT_UA     "elastic-gpu/0.1.0"

/* ------------------------------------------------------------------------ */
/* Files and strings                                                        */

int egpu__kube_read_file(const char *path, size_t max, char **out, size_t *out_len)
{
    struct egpu_buf b;
    char chunk[8192];
    size_t n;
    int rc = 0;
    FILE *f = fopen(path, "rb");

    if (f == NULL)
        return -errno;
    egpu_buf_init(&b, max);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        rc = egpu_buf_append(&b, chunk, n);
        if (rc)
            break;
    }
    if (!rc && ferror(f))
        rc = -EIO;
    fclose(f);
    if (!rc && b.data == NULL)
        rc = egpu_buf_append(&b, "", 0);
    if (rc) {
        egpu_buf_free(&b);
        return rc;
    }
    *out_len = b.len;
    *out = egpu_buf_take(&b);
    return 0;
}

void egpu__kube_trim(char *s)
{
    size_t n = strlen(s), start = 0;

    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    while (s[start] == ' ' || s[start] == '\t' || s[start] == '\n' || s[start] == '\r')
        start++;
    if (start)
        memmove(s, s + start, n - start + 1);
}

static int set_str(char **dst, const char *src)
{
    char *copy = NULL;

    if (src != NULL) {
        copy = egpu_strdup(src);
        if (copy == NULL)
            return -ENOMEM;
    }
    egpu_free(*dst);
    *dst = copy;
    return 0;
}

/* dir + "/" + rel unless rel is absolute or dir is NULL. */
static int join_path(char **dst, const char *dir, const char *rel)
{
    struct egpu_buf b;
    int rc;

    if (rel == NULL || rel[0] == '/' || dir == NULL)
        return set_str(dst, rel);
    egpu_buf_init(&b, 8192);
    rc = egpu_buf_printf(&b, "%s/%s", dir, rel);
    if (rc) {
        egpu_buf_free(&b);
        return rc;
    }
    egpu_free(*dst);
    *dst = egpu_buf_take(&b);
    return 0;
}

static bool exists(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* ------------------------------------------------------------------------ */
/* base64                                                                   */

/* DESIGN: GnuTLS decodes (gnutls_base64_decode2, nettle's strict RFC 4648
 * decoder: alphabet, padding, no stray bits). What kubeconfigs hold is a
 * little looser than it takes, so the input is first normalized, without
 * decoding anything: whitespace anywhere is dropped, as before; the '='
 * padding may be absent or short, so it is put right (one or two, from the
 * count of the other characters); input with no data character is the empty
 * string. Data after a '=', more than two '=', or a data count that leaves six
 * bits (count % 4 == 1) are refused here, since GnuTLS would read a lone
 * full group of padding as the end. Every other character goes to GnuTLS,
 * which refuses those outside the alphabet (its own copy step would stop
 * silently at a '-', so '-' is refused here too). */
int egpu__kube_base64_decode(const char *in, size_t len, char **out, size_t *out_len)
{
    gnutls_datum_t src, dec = {NULL, 0};
    size_t ndata = 0, npad = 0, n = 0;
    char *norm, *dst;
    int g;

    norm = egpu_malloc(len + 3);
    if (norm == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];

        if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            continue;
        if (c == '=') {
            npad++;
            continue;
        }
        if (npad > 0 || c == '-')
            goto fail_syntax;
        norm[n++] = c;
        ndata++;
    }
    if (npad > 2 || ndata % 4 == 1)
        goto fail_syntax;
    if (ndata == 0) {
        norm[0] = '\0';
        *out = norm;
        *out_len = 0;
        return 0;
    }
    while (n % 4 != 0)
        norm[n++] = '=';
    src = (gnutls_datum_t){(unsigned char *)norm, (unsigned)n};
    g = gnutls_base64_decode2(&src, &dec);
    explicit_bzero(norm, len + 3); /* may be a client key */
    egpu_free(norm);
    if (g == GNUTLS_E_MEMORY_ERROR)
        return -ENOMEM;
    if (g < 0)
        return EGPU_ESYNTAX;
    dst = egpu_malloc((size_t)dec.size + 1);
    if (dst != NULL) {
        memcpy(dst, dec.data, dec.size);
        dst[dec.size] = '\0';
        *out = dst;
        *out_len = dec.size;
    }
    explicit_bzero(dec.data, dec.size);
    gnutls_free(dec.data);
    return dst != NULL ? 0 : -ENOMEM;
fail_syntax:
    explicit_bzero(norm, len + 3);
    egpu_free(norm);
    return EGPU_ESYNTAX;
}

/* ------------------------------------------------------------------------ */
/* Config objects                                                           */

static struct egpu_kube_config *config_alloc(void)
{
    struct egpu_kube_config *c = egpu_calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->timeout_ms = 30000;
    if (set_str(&c->user_agent, DEFAULT_UA) || set_str(&c->ns, "default")) {
        egpu_kube_config_free(c);
        return NULL;
    }
    return c;
}

void egpu_kube_config_free(struct egpu_kube_config *cfg)
{
    if (cfg == NULL)
        return;
    egpu_free(cfg->server);
    egpu_free(cfg->ns);
    egpu_free(cfg->context);
    egpu_free(cfg->token);
    egpu_free(cfg->token_file);
    egpu_free(cfg->username);
    egpu_free(cfg->password);
    egpu_free(cfg->ca_file);
    egpu_free(cfg->ca_data);
    egpu_free(cfg->cert_file);
    egpu_free(cfg->cert_data);
    egpu_free(cfg->key_file);
    egpu_free(cfg->key_data);
    egpu_free(cfg->user_agent);
    egpu_free(cfg);
}

static int dup_blob(char **dst, size_t *dst_len, const char *src, size_t len)
{
    if (src == NULL) {
        *dst = NULL;
        *dst_len = 0;
        return 0;
    }
    *dst = egpu_malloc(len + 1);
    if (*dst == NULL)
        return -ENOMEM;
    memcpy(*dst, src, len);
    (*dst)[len] = '\0';
    *dst_len = len;
    return 0;
}

int egpu__kube_config_dup(const struct egpu_kube_config *src, struct egpu_kube_config **out)
{
    struct egpu_kube_config *c = egpu_calloc(1, sizeof(*c));
    int rc = 0;

    if (c == NULL)
        return -ENOMEM;
    rc |= set_str(&c->server, src->server);
    rc |= set_str(&c->ns, src->ns ? src->ns : "default");
    rc |= set_str(&c->context, src->context);
    rc |= set_str(&c->token, src->token);
    rc |= set_str(&c->token_file, src->token_file);
    rc |= set_str(&c->username, src->username);
    rc |= set_str(&c->password, src->password);
    rc |= set_str(&c->ca_file, src->ca_file);
    rc |= set_str(&c->cert_file, src->cert_file);
    rc |= set_str(&c->key_file, src->key_file);
    rc |= set_str(&c->user_agent, src->user_agent ? src->user_agent : DEFAULT_UA);
    rc |= dup_blob(&c->ca_data, &c->ca_data_len, src->ca_data, src->ca_data_len);
    rc |= dup_blob(&c->cert_data, &c->cert_data_len, src->cert_data, src->cert_data_len);
    rc |= dup_blob(&c->key_data, &c->key_data_len, src->key_data, src->key_data_len);
    c->insecure = src->insecure;
    c->timeout_ms = src->timeout_ms > 0 ? src->timeout_ms : 30000;
    if (rc) {
        egpu_kube_config_free(c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

static bool is_http_url(const char *s)
{
    return s != NULL && ((strncmp(s, "https://", 8) == 0 && s[8] != '\0') ||
                         (strncmp(s, "http://", 7) == 0 && s[7] != '\0'));
}

/* Store server without trailing slashes. */
static int set_server(struct egpu_kube_config *c, const char *server)
{
    size_t n;

    if (set_str(&c->server, server))
        return -ENOMEM;
    n = strlen(c->server);
    while (n > 0 && c->server[n - 1] == '/')
        c->server[--n] = '\0';
    return 0;
}

int egpu_kube_config_new(const char *server, const char *token, struct egpu_kube_config **out,
                         struct egpu_error *err)
{
    struct egpu_kube_config *c;

    if (!is_http_url(server))
        return egpu_error_set(err, -EINVAL, "server \"%s\": want an http:// or https:// URL",
                              server ? server : "");
    c = config_alloc();
    if (c == NULL || set_server(c, server) || set_str(&c->token, token)) {
        egpu_kube_config_free(c);
        return egpu_error_set(err, -ENOMEM, "kube config: out of memory");
    }
    *out = c;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* kubeconfig                                                               */

struct kc_file {
    char *path;
    char *dir; /* for relative paths in its entries */
    yaml_document_t doc;
    bool loaded;
};

struct kc_set {
    struct kc_file *files;
    size_t n;
};

static yaml_node_t *yroot(struct kc_file *f)
{
    yaml_node_t *r = yaml_document_get_root_node(&f->doc);

    return r != NULL && r->type == YAML_MAPPING_NODE ? r : NULL;
}

static yaml_node_t *ymap_get(yaml_document_t *d, yaml_node_t *map, const char *key)
{
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(d, p->key);

        if (k != NULL && k->type == YAML_SCALAR_NODE &&
            strcmp((const char *)k->data.scalar.value, key) == 0)
            return yaml_document_get_node(d, p->value);
    }
    return NULL;
}

/* A scalar's text; NULL for absent, null (~, null, empty plain) or not a scalar. */
static const char *yscalar(yaml_node_t *n)
{
    const char *v;

    if (n == NULL || n->type != YAML_SCALAR_NODE)
        return NULL;
    v = (const char *)n->data.scalar.value;
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        (v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
         strcmp(v, "NULL") == 0))
        return NULL;
    if (v[0] == '\0')
        return NULL;
    return v;
}

/* A string field: absent is fine (*out NULL), a mapping or sequence is not. */
static int ystr(yaml_document_t *d, yaml_node_t *map, const char *key, const char **out,
                const char *what, struct egpu_error *err)
{
    yaml_node_t *n = ymap_get(d, map, key);

    *out = yscalar(n);
    if (n != NULL && n->type != YAML_SCALAR_NODE)
        return egpu_error_set(err, EGPU_ESYNTAX, "kubeconfig: %s: %s is not a string", what, key);
    return 0;
}

static void kc_set_free(struct kc_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->files[i].loaded)
            yaml_document_delete(&s->files[i].doc);
        egpu_free(s->files[i].path);
        egpu_free(s->files[i].dir);
    }
    egpu_free(s->files);
    s->files = NULL;
    s->n = 0;
}

static int kc_load_one(struct kc_file *f, struct egpu_error *err)
{
    yaml_parser_t parser;
    char *data, *slash;
    size_t len;
    int rc = egpu__kube_read_file(f->path, KUBECONFIG_MAX, &data, &len);

    if (rc)
        return egpu_error_set(err, rc, "kubeconfig %s: %s", f->path, egpu_strerror(rc));
    slash = strrchr(f->path, '/');
    if (slash != NULL) {
        f->dir = egpu_strdup(f->path);
        if (f->dir == NULL) {
            egpu_free(data);
            return egpu_error_set(err, -ENOMEM, "kubeconfig: out of memory");
        }
        f->dir[slash - f->path == 0 ? 1 : slash - f->path] = '\0';
    }
    if (!yaml_parser_initialize(&parser)) {
        egpu_free(data);
        return egpu_error_set(err, -ENOMEM, "kubeconfig: out of memory");
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    if (!yaml_parser_load(&parser, &f->doc)) {
        rc = egpu_error_set(err, EGPU_ESYNTAX, "kubeconfig %s:%zu:%zu: %s", f->path,
                            parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                            parser.problem ? parser.problem : "malformed YAML");
    } else {
        f->loaded = true;
        if (yaml_document_get_root_node(&f->doc) != NULL && yroot(f) == NULL)
            rc = egpu_error_set(err, EGPU_ESYNTAX, "kubeconfig %s: top level is not a mapping",
                                f->path);
    }
    yaml_parser_delete(&parser);
    egpu_free(data);
    return rc;
}

/* Load every existing file of a ':'-separated list (a single path must exist). */
static int kc_load(struct kc_set *s, const char *paths, struct egpu_error *err)
{
    bool single = strchr(paths, ':') == NULL;
    const char *p = paths;
    size_t count = 1;
    int rc;

    for (const char *q = paths; *q; q++)
        count += *q == ':';
    s->files = egpu_calloc(count, sizeof(*s->files));
    if (s->files == NULL)
        return egpu_error_set(err, -ENOMEM, "kubeconfig: out of memory");
    while (p != NULL) {
        const char *start = p, *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        struct kc_file *f = &s->files[s->n];

        p = colon ? colon + 1 : NULL;
        if (len == 0)
            continue;
        f->path = egpu_malloc(len + 1);
        if (f->path == NULL)
            return egpu_error_set(err, -ENOMEM, "kubeconfig: out of memory");
        memcpy(f->path, start, len);
        f->path[len] = '\0';
        s->n++;
        if (!single && !exists(f->path))
            continue;
        rc = kc_load_one(f, err);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < s->n; i++) {
        if (s->files[i].loaded)
            return 0;
    }
    return egpu_error_set(err, -ENOENT, "kubeconfig: none of \"%s\" exists", paths);
}

/* The first file's entry `name` of list (clusters, users, contexts); *inner is
 * its `field` mapping (cluster, user, context), *fi the file. */
static int kc_find(struct kc_set *s, const char *list, const char *field, const char *name,
                   yaml_node_t **inner, size_t *fi, struct egpu_error *err)
{
    for (size_t i = 0; i < s->n; i++) {
        struct kc_file *f = &s->files[i];
        yaml_node_t *seq;

        if (!f->loaded)
            continue;
        seq = ymap_get(&f->doc, yroot(f), list);
        if (seq == NULL || (seq->type == YAML_SCALAR_NODE && yscalar(seq) == NULL))
            continue;
        if (seq->type != YAML_SEQUENCE_NODE)
            return egpu_error_set(err, EGPU_ESYNTAX, "kubeconfig %s: %s is not a list", f->path,
                                  list);
        for (yaml_node_item_t *it = seq->data.sequence.items.start;
             it < seq->data.sequence.items.top; it++) {
            yaml_node_t *entry = yaml_document_get_node(&f->doc, *it);
            const char *ename = yscalar(ymap_get(&f->doc, entry, "name"));

            if (ename == NULL || strcmp(ename, name) != 0)
                continue;
            *inner = ymap_get(&f->doc, entry, field);
            if (*inner != NULL && (*inner)->type != YAML_MAPPING_NODE)
                return egpu_error_set(err, EGPU_ESYNTAX, "kubeconfig %s: %s \"%s\" has no %s",
                                      f->path, list, name, field);
            *fi = i;
            return 0;
        }
    }
    return egpu_error_set(err, -ENOENT, "kubeconfig: %s \"%s\" not found", field, name);
}

/* Decode base64 field key of map into (*data, *len); absent leaves them. */
static int kc_data(yaml_document_t *d, yaml_node_t *map, const char *key, const char *what,
                   char **data, size_t *len, struct egpu_error *err)
{
    const char *v;
    int rc = ystr(d, map, key, &v, what, err);

    if (rc || v == NULL)
        return rc;
    rc = egpu__kube_base64_decode(v, strlen(v), data, len);
    if (rc == EGPU_ESYNTAX)
        return egpu_error_set(err, rc, "kubeconfig: %s: %s is not valid base64", what, key);
    if (rc)
        return egpu_error_set(err, rc, "kubeconfig: out of memory");
    return 0;
}

static int kc_cluster(struct kc_set *s, const char *name, struct egpu_kube_config *c,
                      struct egpu_error *err)
{
    yaml_node_t *m = NULL;
    const char *server, *ca, *insecure;
    char what[160];
    yaml_document_t *d;
    size_t fi;
    int rc = kc_find(s, "clusters", "cluster", name, &m, &fi, err);

    if (rc)
        return rc;
    d = &s->files[fi].doc;
    snprintf(what, sizeof(what), "cluster \"%s\"", name);
    if ((rc = ystr(d, m, "server", &server, what, err)) ||
        (rc = ystr(d, m, "certificate-authority", &ca, what, err)) ||
        (rc = ystr(d, m, "insecure-skip-tls-verify", &insecure, what, err)))
        return rc;
    if (server == NULL)
        return egpu_error_set(err, -EINVAL, "kubeconfig: %s has no server", what);
    if (!is_http_url(server))
        return egpu_error_set(err, -EINVAL, "kubeconfig: %s: server \"%s\" is not an http(s) URL",
                              what, server);
    if (insecure != NULL) {
        if (strcmp(insecure, "true") == 0 || strcmp(insecure, "True") == 0 ||
            strcmp(insecure, "TRUE") == 0)
            c->insecure = true;
        else if (strcmp(insecure, "false") != 0 && strcmp(insecure, "False") != 0 &&
                 strcmp(insecure, "FALSE") != 0)
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "kubeconfig: %s: insecure-skip-tls-verify \"%s\" is not a bool",
                                  what, insecure);
    }
    if (set_server(c, server))
        return egpu_error_set(err, -ENOMEM, "kubeconfig: out of memory");
    /* certificate-authority-data overrides certificate-authority, as in client-go. */
    rc = kc_data(d, m, "certificate-authority-data", what, &c->ca_data, &c->ca_data_len, err);
    if (rc)
        return rc;
    if (c->ca_data == NULL && join_path(&c->ca_file, s->files[fi].dir, ca))
        return egpu_error_set(err, -ENOMEM, "kubeconfig: out of memory");
    return 0;
}

static int kc_user(struct kc_set *s, const char *name, struct egpu_kube_config *c,
                   struct egpu_error *err)
{
    yaml_node_t *m = NULL;
    const char *token, *token_file, *cert, *key, *user, *pass;
    char what[160];
    yaml_document_t *d;
    const char *dir;
    size_t fi;
    int rc = kc_find(s, "users", "user", name, &m, &fi, err);

    if (rc)
        return rc;
    d = &s->files[fi].doc;
    dir = s->files[fi].dir;
    snprintf(what, sizeof(what), "user \"%s\"", name);
    if ((rc = ystr(d, m, "token", &token, what, err)) ||
        (rc = ystr(d, m, "tokenFile", &token_file, what, err)) ||
        (rc = ystr(d, m, "client-certificate", &cert, what, err)) ||
        (rc = ystr(d, m, "client-key", &key, what, err)) ||
        (rc = ystr(d, m, "username", &user, what, err)) ||
        (rc = ystr(d, m, "password", &pass, what, err)))
        return rc;
    if ((rc = kc_data(d, m, "client-certificate-data", what, &c->cert_data, &c->cert_data_len,
                      err)) ||
        (rc = kc_data(d, m, "client-key-data", what, &c->key_data, &c->key_data_len, err)))
        return rc;
    if (set_str(&c->token, token) || join_path(&c->token_file, dir, token_file) ||
        set_str(&c->username, user) || set_str(&c->password, pass) ||
        (c->cert_data == NULL && join_path(&c->cert_file, dir, cert)) ||
        (c->key_data == NULL && join_path(&c->key_file, dir, key)))
        return egpu_error_set(err, -ENOMEM, "kubeconfig: out of memory");
    if ((c->cert_data || c->cert_file) != (c->key_data || c->key_file))
        return egpu_error_set(err, -EINVAL,
                              "kubeconfig: %s: a client certificate needs a client key and the "
                              "other way round",
                              what);
    if (c->token == NULL && c->token_file == NULL && c->cert_data == NULL && c->cert_file == NULL &&
        c->username == NULL &&
        (ymap_get(d, m, "exec") != NULL || ymap_get(d, m, "auth-provider") != NULL))
        return egpu_error_set(err, -ENOTSUP,
                              "kubeconfig: %s uses an exec or auth-provider credential plugin, "
                              "which is not supported; use a token or a client certificate",
                              what);
    return 0;
}

static int kc_resolve(struct kc_set *s, const char *context, struct egpu_kube_config *c,
                      struct egpu_error *err)
{
    yaml_node_t *m = NULL;
    const char *cluster, *user, *ns;
    char what[160];
    size_t fi;
    int rc;

    for (size_t i = 0; context == NULL && i < s->n; i++) {
        if (s->files[i].loaded && (rc = ystr(&s->files[i].doc, yroot(&s->files[i]),
                                             "current-context", &context, "top level", err)))
            return rc;
    }
    if (context == NULL)
        return egpu_error_set(err, -ENOENT,
                              "kubeconfig: no current-context is set and no context was given");
    rc = kc_find(s, "contexts", "context", context, &m, &fi, err);
    if (rc)
        return rc;
    snprintf(what, sizeof(what), "context \"%s\"", context);
    if ((rc = ystr(&s->files[fi].doc, m, "cluster", &cluster, what, err)) ||
        (rc = ystr(&s->files[fi].doc, m, "user", &user, what, err)) ||
        (rc = ystr(&s->files[fi].doc, m, "namespace", &ns, what, err)))
        return rc;
    if (cluster == NULL)
        return egpu_error_set(err, -EINVAL, "kubeconfig: %s names no cluster", what);
    if (set_str(&c->context, context) || (ns != NULL && set_str(&c->ns, ns)))
        return egpu_error_set(err, -ENOMEM, "kubeconfig: out of memory");
    rc = kc_cluster(s, cluster, c, err);
    if (!rc && user != NULL)
        rc = kc_user(s, user, c, err);
    return rc;
}

int egpu_kube_config_from_kubeconfig(const char *paths, const char *context,
                                     struct egpu_kube_config **out, struct egpu_error *err)
{
    struct kc_set set = {0};
    struct egpu_kube_config *c;
    int rc;

    if (paths == NULL || paths[0] == '\0')
        return egpu_error_set(err, -ENOENT, "kubeconfig: no path given");
    c = config_alloc();
    if (c == NULL)
        return egpu_error_set(err, -ENOMEM, "kubeconfig: out of memory");
    rc = kc_load(&set, paths, err);
    if (!rc)
        rc = kc_resolve(&set, context, c, err);
    kc_set_free(&set);
    if (rc) {
        egpu_kube_config_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* In-cluster                                                               */

int egpu_kube_config_in_cluster(const char *sa_dir, struct egpu_kube_config **out,
                                struct egpu_error *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    const char *pod_ns = getenv("POD_NAMESPACE");
    struct egpu_kube_config *c;
    struct egpu_buf b;
    char *data = NULL;
    size_t len;
    int rc;

    if (host == NULL || host[0] == '\0' || port == NULL || port[0] == '\0')
        return egpu_error_set(err, -ENOENT,
                              "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST "
                              "and KUBERNETES_SERVICE_PORT must be defined");
    if (sa_dir == NULL)
        sa_dir = SA_DIR;
    c = config_alloc();
    if (c == NULL)
        return egpu_error_set(err, -ENOMEM, "in-cluster config: out of memory");
    egpu_buf_init(&b, 8192);
    rc = egpu_buf_printf(&b, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
    if (!rc)
        c->server = egpu_buf_take(&b);
    egpu_buf_free(&b);
    if (rc || join_path(&c->token_file, sa_dir, "token") ||
        join_path(&c->ca_file, sa_dir, "ca.crt"))
        goto fail_nomem;
    /* The token must be readable now (client-go fails here too); the client
     * re-reads it whenever the kubelet rotates it. */
    rc = egpu__kube_read_file(c->token_file, SMALL_FILE_MAX, &data, &len);
    if (rc) {
        egpu_error_set(err, rc, "in-cluster config: token %s: %s", c->token_file,
                       egpu_strerror(rc));
        egpu_kube_config_free(c);
        return rc;
    }
    egpu__kube_trim(data);
    c->token = data;
    if (!exists(c->ca_file)) {
        egpu_log(EGPU_LOG_WARN, "in-cluster CA missing, using system roots ca=%s", c->ca_file);
        egpu_free(c->ca_file);
        c->ca_file = NULL;
    }
    if (pod_ns != NULL && pod_ns[0] != '\0') {
        if (set_str(&c->ns, pod_ns))
            goto fail_nomem;
    } else {
        char *path = NULL;

        if (join_path(&path, sa_dir, "namespace"))
            goto fail_nomem;
        rc = egpu__kube_read_file(path, SMALL_FILE_MAX, &data, &len);
        egpu_free(path);
        if (rc == 0) {
            egpu__kube_trim(data);
            if (data[0] != '\0') {
                egpu_free(c->ns);
                c->ns = data;
            } else {
                egpu_free(data);
            }
        }
    }
    *out = c;
    return 0;
fail_nomem:
    egpu_kube_config_free(c);
    return egpu_error_set(err, -ENOMEM, "in-cluster config: out of memory");
}

/* ------------------------------------------------------------------------ */
/* kubectl's order                                                          */

static bool any_exists(const char *paths)
{
    char path[4096];
    const char *p = paths;

    while (p != NULL && *p) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);

        if (len > 0 && len < sizeof(path)) {
            memcpy(path, p, len);
            path[len] = '\0';
            if (exists(path))
                return true;
        }
        p = colon ? colon + 1 : NULL;
    }
    return false;
}

int egpu_kube_config_load(const char *kubeconfig, const char *context,
                          struct egpu_kube_config **out, struct egpu_error *err)
{
    const char *env = getenv("KUBECONFIG");
    const char *home = getenv("HOME");
    char path[4096];
    int rc;

    if (kubeconfig != NULL && kubeconfig[0] != '\0')
        return egpu_kube_config_from_kubeconfig(kubeconfig, context, out, err);
    if (env != NULL && env[0] != '\0' && any_exists(env))
        return egpu_kube_config_from_kubeconfig(env, context, out, err);
    if (home != NULL && home[0] != '\0' &&
        (size_t)snprintf(path, sizeof(path), "%s/.kube/config", home) < sizeof(path) &&
        exists(path))
        return egpu_kube_config_from_kubeconfig(path, context, out, err);
    rc = egpu_kube_config_in_cluster(NULL, out, err);
    if (rc == 0)
        return 0;
    /* Not only the last place tried: every one, in kubectl's order. */
    return egpu_error_prefix(
        err, rc, "no kubeconfig: --kubeconfig not given; $KUBECONFIG %s%.256s%s; %s%s; in-cluster",
        env == NULL || env[0] == '\0' ? "not set" : "\"", env != NULL ? env : "",
        env == NULL || env[0] == '\0' ? "" : "\" names no file that exists",
        home == NULL || home[0] == '\0' ? "$HOME not set, so no ~/.kube/config" : path,
        home == NULL || home[0] == '\0' ? "" : ": no such file");
}
