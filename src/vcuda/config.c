/* vcuda/config.c - the interposer's configuration (see vcuda_int.h).
 *
 * Where it comes from, in order: the agent's file <default dir>/vcuda.conf
 * (the allocation directory mounted read-only at /etc/elastic-gpu), which
 * no environment variable can override; a vcuda.conf in $EGPU_VCUDA_DIR;
 * the EGPU_VCUDA_* variables (use without Kubernetes); otherwise nothing
 * (source EGPU_VCUDA_SRC_NONE), which the interposer treats as a broken
 * configuration: it refuses every CUDA call (hooks.c). The shared regions live in the
 * directory's subdir shared/ when there is one (the agent's layout), else
 * in the directory itself (see vcuda_int.h).
 *
 * DESIGN: parsing is strict because a wrong limit is worse than none: an
 * unknown key, a malformed or out-of-range number, a duplicate key, a NUL
 * byte, a missing final newline (a truncated file) or a missing required key
 * is an error naming the file, the line and the key; so is a share of one
 * card (EGPU_VCUDA_CORE 1..99) with EGPU_VCUDA_MEMORY_MIB=0 in vcuda.conf,
 * whose memory the scheduler booked as 0 MiB. A broken configuration
 * fails closed (the record says memory limit 0 on the configured cards; the
 * interposer refuses every CUDA call) so a container can never run
 * unlimited because its limits file was damaged. The caller prints the one
 * message once.
 *
 * Units: memory in MiB, compute in percent of one card.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "egpu/log.h"
#include "vcuda_int.h"

#define KEY_PREFIX "EGPU_VCUDA_"

/* Keys a setting may have, in the order messages list them. */
enum key_id {
    K_GPUS,
    K_MEMORY,
    K_CORE,
    K_CORE_LIMIT,
    K_CONTEXT,
    K_CONTEXT_EXTRA,
    K_LOG_LEVEL,
    K_COUNT,
};

static const char *const key_names[K_COUNT] = {
    "EGPU_VCUDA_GPUS",       "EGPU_VCUDA_MEMORY_MIB",  "EGPU_VCUDA_CORE",
    "EGPU_VCUDA_CORE_LIMIT", "EGPU_VCUDA_CONTEXT_MIB", "EGPU_VCUDA_CONTEXT_EXTRA_MIB",
    "EGPU_VCUDA_LOG_LEVEL",
};

static int key_lookup(const char *key)
{
    for (int i = 0; i < K_COUNT; i++) {
        if (strcmp(key, key_names[i]) == 0)
            return i;
    }
    return -1;
}

int egpu__vcuda_uuid_parse(const char *s, struct egpu__vcuda_uuid *out)
{
    return egpu_gpu_uuid_parse(s, out->b);
}

char *egpu__vcuda_uuid_format(const struct egpu__vcuda_uuid *u, char *buf)
{
    return egpu_gpu_uuid_format(u->b, buf);
}

void egpu__vcuda_config_defaults(struct egpu__vcuda_config *cfg, const char *dir)
{
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->dir, sizeof(cfg->dir), "%s", dir ? dir : "");
    snprintf(cfg->region_dir, sizeof(cfg->region_dir), "%s", cfg->dir);
    cfg->context_mib = EGPU_VCUDA_CONTEXT_MIB_DEFAULT;
    cfg->log_level = EGPU_LOG_WARN;
}

/* Decimal digits only (no sign, no spaces, no 0x), value in [lo, hi]. */
static int parse_number(const char *key, const char *s, uint64_t lo, uint64_t hi, uint64_t *out,
                        struct egpu_error *err)
{
    uint64_t v = 0;

    if (*s == '\0')
        return egpu_error_set(err, -EINVAL, "%s: empty value (allowed %llu..%llu)", key,
                              (unsigned long long)lo, (unsigned long long)hi);
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return egpu_error_set(err, -EINVAL,
                                  "%s=\"%.40s\": not a decimal number (allowed %llu..%llu)", key, s,
                                  (unsigned long long)lo, (unsigned long long)hi);
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            v = UINT64_MAX; /* saturate: reported as out of range below */
        else
            v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v < lo || v > hi)
        return egpu_error_set(err, -ERANGE, "%s=%.40s: out of range (allowed %llu..%llu)", key, s,
                              (unsigned long long)lo, (unsigned long long)hi);
    *out = v;
    return 0;
}

static int parse_gpus(struct egpu__vcuda_config *cfg, const char *key, const char *s,
                      struct egpu_error *err)
{
    struct egpu__vcuda_uuid gpus[EGPU_VCUDA_MAX_CARDS];
    unsigned n = 0;

    while (1) {
        char one[64];
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);

        if (n == EGPU_VCUDA_MAX_CARDS)
            return egpu_error_set(err, -ERANGE, "%s: more than %d GPUs", key, EGPU_VCUDA_MAX_CARDS);
        if (len == 0 || len >= sizeof(one))
            return egpu_error_set(err, -EINVAL,
                                  "%s: empty or overlong entry (allowed a comma-separated list of "
                                  "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
                                  key);
        memcpy(one, s, len);
        one[len] = '\0';
        if (egpu__vcuda_uuid_parse(one, &gpus[n]) != 0)
            return egpu_error_set(err, -EINVAL,
                                  "%s: \"%s\" is not a GPU UUID (allowed a comma-separated list of "
                                  "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
                                  key, one);
        for (unsigned i = 0; i < n; i++) {
            if (memcmp(&gpus[i], &gpus[n], sizeof(gpus[n])) == 0)
                return egpu_error_set(err, -EINVAL,
                                      "%s: %s listed twice (allowed distinct GPU UUIDs)", key, one);
        }
        n++;
        if (comma == NULL)
            break;
        s = comma + 1;
    }
    memcpy(cfg->gpus, gpus, n * sizeof(gpus[0]));
    cfg->ngpus = n;
    return 0;
}

int egpu__vcuda_config_set(struct egpu__vcuda_config *cfg, const char *key, const char *value,
                           struct egpu_error *err)
{
    uint64_t v;
    int rc;

    switch (key_lookup(key)) {
    case K_GPUS:
        return parse_gpus(cfg, key, value, err);
    case K_MEMORY:
        rc = parse_number(key, value, 0, EGPU_VCUDA_MEMORY_MIB_MAX, &v, err);
        if (rc == 0) {
            /* 0: no memory limit; in vcuda.conf only with
             * EGPU_VCUDA_CORE=100 (whole cards, which come with all their
             * memory): egpu__vcuda_config_parse refuses it for a share. */
            cfg->has_memory = v > 0;
            cfg->memory_mib = v;
        }
        return rc;
    case K_CORE:
        rc = parse_number(key, value, 1, 100, &v, err);
        if (rc == 0) {
            cfg->has_core = true;
            cfg->core_pct = (unsigned)v;
        }
        return rc;
    case K_CORE_LIMIT:
        rc = parse_number(key, value, 1, 100, &v, err);
        if (rc == 0)
            cfg->core_limit_pct = (unsigned)v;
        return rc;
    case K_CONTEXT:
        rc = parse_number(key, value, 0, EGPU_VCUDA_CONTEXT_MIB_MAX, &v, err);
        if (rc == 0) {
            cfg->context_mib = v;
            cfg->has_context_mib = true;
        }
        return rc;
    case K_CONTEXT_EXTRA:
        rc = parse_number(key, value, 0, EGPU_VCUDA_CONTEXT_MIB_MAX, &v, err);
        if (rc == 0)
            cfg->ctx_extra_mib = v;
        return rc;
    case K_LOG_LEVEL:
        if (strcmp(value, "error") == 0 || strcmp(value, "warn") == 0 ||
            strcmp(value, "info") == 0 || strcmp(value, "debug") == 0)
            return egpu_log_parse_level(value, &cfg->log_level);
        return egpu_error_set(err, -EINVAL,
                              "%s=\"%.40s\": unknown level (allowed error, warn, info, debug)", key,
                              value);
    default:
        return egpu_error_set(err, -ENOENT,
                              "%.64s: unknown key (allowed EGPU_VCUDA_GPUS, EGPU_VCUDA_MEMORY_MIB, "
                              "EGPU_VCUDA_CORE, EGPU_VCUDA_CORE_LIMIT, EGPU_VCUDA_CONTEXT_MIB, "
                              "EGPU_VCUDA_CONTEXT_EXTRA_MIB, EGPU_VCUDA_LOG_LEVEL)",
                              key);
    }
}

int egpu__vcuda_config_check(struct egpu__vcuda_config *cfg, struct egpu_error *err)
{
    if (cfg->core_limit_pct != 0 && !cfg->has_core)
        return egpu_error_set(err, -EINVAL, "EGPU_VCUDA_CORE_LIMIT=%u needs EGPU_VCUDA_CORE",
                              cfg->core_limit_pct);
    if (!cfg->has_core)
        return 0;
    if (cfg->core_limit_pct == 0)
        cfg->core_limit_pct = cfg->core_pct;
    if (cfg->core_limit_pct < cfg->core_pct)
        return egpu_error_set(err, -ERANGE,
                              "EGPU_VCUDA_CORE_LIMIT=%u: out of range (allowed EGPU_VCUDA_CORE=%u"
                              "..100)",
                              cfg->core_limit_pct, cfg->core_pct);
    return 0;
}

void egpu__vcuda_config_fail_closed(struct egpu__vcuda_config *cfg)
{
    cfg->fail_closed = true;
    cfg->has_memory = true;
    cfg->memory_mib = 0;
    cfg->has_core = false;
    cfg->core_pct = 0;
    cfg->core_limit_pct = 0;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* Trim [*b, *e) of spaces at both ends. */
static void trim(const char **b, const char **e)
{
    while (*b < *e && is_space(**b))
        (*b)++;
    while (*e > *b && is_space((*e)[-1]))
        (*e)--;
}

int egpu__vcuda_config_parse(struct egpu__vcuda_config *cfg, const char *text, size_t len,
                             const char *path, struct egpu_error *err)
{
    bool seen[K_COUNT] = {false};
    const char *p = text, *end = text + len;
    unsigned line = 0;
    int rc = 0;

    if (memchr(text, '\0', len) != NULL)
        return egpu_error_set(err, -EINVAL, "%s: corrupted (a NUL byte)", path);
    if (len > 0 && text[len - 1] != '\n') {
        /* The complete lines still count (a valid card list says which
         * cards fail closed); the cut one does not. */
        rc = egpu_error_set(err, -EINVAL,
                            "%s: truncated (the last line has no newline; lines are KEY=VALUE)",
                            path);
        while (end > text && end[-1] != '\n')
            end--;
    }
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *b = p, *e = nl, *eq;
        char key[64], value[512];
        struct egpu_error one = {0};
        int id;

        line++;
        p = nl + 1;
        trim(&b, &e);
        if (b == e || *b == '#')
            continue;
        eq = memchr(b, '=', (size_t)(e - b));
        if (eq == NULL) {
            if (rc == 0)
                rc = egpu_error_set(err, -EINVAL, "%s line %u: \"%.*s\": not KEY=VALUE", path, line,
                                    (int)(e - b > 40 ? 40 : e - b), b);
            continue;
        }
        {
            const char *kb = b, *ke = eq, *vb = eq + 1, *ve = e;

            trim(&kb, &ke);
            trim(&vb, &ve);
            if ((size_t)(ke - kb) >= sizeof(key) || (size_t)(ve - vb) >= sizeof(value)) {
                if (rc == 0)
                    rc = egpu_error_set(err, -EINVAL, "%s line %u: overlong key or value", path,
                                        line);
                continue;
            }
            memcpy(key, kb, (size_t)(ke - kb));
            key[ke - kb] = '\0';
            memcpy(value, vb, (size_t)(ve - vb));
            value[ve - vb] = '\0';
        }
        id = key_lookup(key);
        if (id >= 0 && seen[id]) {
            if (rc == 0)
                rc = egpu_error_set(err, -EINVAL, "%s line %u: %s: set twice", path, line, key);
            continue; /* keep parsing: a later valid EGPU_VCUDA_GPUS still counts */
        }
        if (egpu__vcuda_config_set(cfg, key, value, &one) != 0) {
            if (rc == 0)
                rc = egpu_error_set(err, one.code, "%s line %u: %s", path, line, one.msg);
            continue;
        }
        seen[id] = true;
    }
    if (rc)
        return rc;
    if (!seen[K_MEMORY] || !seen[K_CORE])
        return egpu_error_set(err, -EINVAL,
                              "%s: %s missing (the file is truncated or incomplete; it must set "
                              "EGPU_VCUDA_MEMORY_MIB and EGPU_VCUDA_CORE)",
                              path, !seen[K_MEMORY] ? key_names[K_MEMORY] : key_names[K_CORE]);
    rc = egpu__vcuda_config_check(cfg, err);
    if (rc)
        return egpu_error_prefix(err, rc, "%s", path);
    /* The agent's file for a share of one card: 0 MiB is what the scheduler
     * booked for it, so it is what applies (a broken file, failing
     * closed), never "no limit": a share with no memory limit would take a
     * card whose other tenants booked theirs. */
    if (cfg->core_pct < 100 && !cfg->has_memory)
        return egpu_error_set(err, -ERANGE,
                              "%s: EGPU_VCUDA_MEMORY_MIB=0 with EGPU_VCUDA_CORE=%u: a share of one "
                              "card needs a memory limit (the container asked "
                              "elasticgpu.io/gpu-core without elasticgpu.io/gpu-memory); allowed: "
                              "EGPU_VCUDA_MEMORY_MIB 1..%d with EGPU_VCUDA_CORE 1..99, or 0 with "
                              "EGPU_VCUDA_CORE=100 (whole cards)",
                              path, cfg->core_pct, EGPU_VCUDA_MEMORY_MIB_MAX);
    return 0;
}

/* Read path into buf (at most cap bytes); a link at path is not followed
 * and only a regular file is read (a FIFO never blocks). Returns the length,
 * -ENOENT when there is no file, -ELOOP for a link, -EFBIG when it is
 * larger than cap, or another -errno. */
static long read_file(const char *path, char *buf, size_t cap)
{
    struct stat st;
    size_t len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK);

    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) != 0) {
        int e = errno;

        close(fd);
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
    }
    while (len < cap) {
        ssize_t n = read(fd, buf + len, cap - len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;

            close(fd);
            return -e;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len == cap) {
        char extra;
        ssize_t n = read(fd, &extra, 1);

        if (n > 0) {
            close(fd);
            return -EFBIG;
        }
    }
    close(fd);
    return (long)len;
}

static const char *env_get(char *const *envp, const char *name)
{
    size_t n = strlen(name);

    for (char *const *e = envp; e && *e; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

/* Load <dir>/vcuda.conf. Returns 1 when it exists and is valid, 0 when there
 * is none, or a negative errno for a broken one (err set, cfg failed closed). */
static int load_file(struct egpu__vcuda_config *cfg, const char *dir, struct egpu_error *err)
{
    static char text[EGPU_VCUDA_CONF_MAX_BYTES]; /* loading runs once, under pthread_once */
    char path[PATH_MAX];
    long len;
    int rc;

    if (snprintf(path, sizeof(path), "%s/%s", dir, EGPU_VCUDA_CONF_NAME) >= (int)sizeof(path))
        return 0;
    len = read_file(path, text, sizeof(text));
    if (len == -ENOENT || len == -ENOTDIR)
        return 0;
    egpu__vcuda_config_defaults(cfg, dir);
    cfg->source = EGPU_VCUDA_SRC_FILE;
    if (len == -EFBIG)
        rc = egpu_error_set(err, -EFBIG, "%s: corrupted (larger than %d bytes)", path,
                            EGPU_VCUDA_CONF_MAX_BYTES);
    else if (len == -ELOOP)
        rc = egpu_error_set(err, -ELOOP, "%s: unreadable: a symbolic link (not followed)", path);
    else if (len < 0)
        rc = egpu_error_set(err, (int)len, "%s: unreadable: %s", path, strerror((int)-len));
    else
        rc = egpu__vcuda_config_parse(cfg, text, (size_t)len, path, err);
    if (rc) {
        egpu__vcuda_config_fail_closed(cfg);
        return egpu_error_prefix(err, rc, "bad configuration, failing closed");
    }
    return 1;
}

/* cfg->region_dir: <cfg->dir>/shared when that is a directory (not a
 * link), else cfg->dir. */
static void pick_region_dir(struct egpu__vcuda_config *cfg)
{
    char sub[PATH_MAX];
    struct stat st;
    int w;

    snprintf(cfg->region_dir, sizeof(cfg->region_dir), "%s", cfg->dir);
    if (cfg->dir[0] == '\0')
        return;
    w = snprintf(sub, sizeof(sub), "%s/%s", cfg->dir, EGPU_VCUDA_SHARED_SUBDIR);
    if (w > 0 && (size_t)w < sizeof(sub) && lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
        memcpy(cfg->region_dir, sub, (size_t)w + 1);
}

static int load(struct egpu__vcuda_config *cfg, const char *default_dir, char *const *envp,
                struct egpu_error *err);

int egpu__vcuda_config_load(struct egpu__vcuda_config *cfg, const char *default_dir,
                            char *const *envp, struct egpu_error *err)
{
    int rc = load(cfg, default_dir, envp, err);

    pick_region_dir(cfg);
    return rc;
}

static int load(struct egpu__vcuda_config *cfg, const char *default_dir, char *const *envp,
                struct egpu_error *err)
{
    const char *dir = env_get(envp, "EGPU_VCUDA_DIR");
    int rc;

    egpu__vcuda_config_defaults(cfg, default_dir);
    if (default_dir && default_dir[0]) {
        rc = load_file(cfg, default_dir, err);
        if (rc != 0)
            return rc < 0 ? rc : 0;
    }
    if (dir && dir[0]) {
        rc = load_file(cfg, dir, err);
        if (rc != 0)
            return rc < 0 ? rc : 0;
    }
    egpu__vcuda_config_defaults(cfg, dir && dir[0] ? dir : default_dir);
    rc = 0;
    for (char *const *e = envp; e && *e; e++) {
        char key[64];
        const char *eq = strchr(*e, '=');
        size_t klen = eq ? (size_t)(eq - *e) : 0;
        struct egpu_error one = {0};

        if (strncmp(*e, KEY_PREFIX, strlen(KEY_PREFIX)) != 0 || eq == NULL)
            continue;
        if (klen >= sizeof(key))
            klen = sizeof(key) - 1;
        memcpy(key, *e, klen);
        key[klen] = '\0';
        if (strcmp(key, "EGPU_VCUDA_DIR") == 0)
            continue;
        cfg->source = EGPU_VCUDA_SRC_ENV;
        if (egpu__vcuda_config_set(cfg, key, eq + 1, &one) != 0 && rc == 0)
            rc = egpu_error_set(err, one.code, "environment: %s", one.msg);
    }
    if (rc == 0) {
        rc = egpu__vcuda_config_check(cfg, err);
        if (rc)
            egpu_error_prefix(err, rc, "environment");
    }
    if (rc) {
        egpu__vcuda_config_fail_closed(cfg);
        return egpu_error_prefix(err, rc, "bad configuration, failing closed");
    }
    if (!cfg->has_memory && !cfg->has_core)
        cfg->source = EGPU_VCUDA_SRC_NONE; /* nothing to limit: every hook passes through */
    return 0;
}

int egpu__vcuda_config_gpu_index(const struct egpu__vcuda_config *cfg,
                                 const struct egpu__vcuda_uuid *u)
{
    for (unsigned i = 0; i < cfg->ngpus; i++) {
        if (memcmp(&cfg->gpus[i], u, sizeof(*u)) == 0)
            return (int)i;
    }
    return -1;
}

bool egpu__vcuda_config_covers(const struct egpu__vcuda_config *cfg,
                               const struct egpu__vcuda_uuid *u)
{
    return cfg->ngpus == 0 || egpu__vcuda_config_gpu_index(cfg, u) >= 0;
}
