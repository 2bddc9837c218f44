/* agent/cdi.c - the CDI spec of one prepared DRA claim: built, checked,
 * written into the runtimes' CDI dir and removed again (cdi_int.h).
 *
 * The spec gives a claim's container what device-plugin mode gives a
 * container for the same share (allocate.c): per device its
 * /dev/nvidia<minor>, the share's allocation dir read-only at
 * /etc/elastic-gpu (EGPU_ALLOCDIR_CONTAINER_DIR, where the interposer reads
 * vcuda.conf before any variable), and, sharing the card, the dir's shared/
 * read-write over it and its ld.so.preload at /etc/ld.so.preload, so
 * unsetting LD_PRELOAD cannot escape the limits. The env repeats vcuda.conf
 * (EGPU_VCUDA_GPUS, _CORE, _MEMORY_MIB, _CORE_LIMIT, [_CONTEXT_EXTRA_MIB])
 * and points at it (EGPU_VCUDA_DIR, EGPU_ALLOC_DIR); the file stays the
 * authority, since any process may change its own environment. Spec-level
 * edits (applied with any of the claim's devices): the control nodes
 * /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools, rw as allocate.c
 * gives them, and the interposer read-only when a device shares its card.
 * Every variable is set per device (no spec-level env): which of two CDI
 * devices wins a name both set is not specified (cdi_notes.md 3). A share
 * of a card comes alone in its claim: beside another device in one
 * container, one allocation dir at /etc/elastic-gpu would hide the other's
 * vcuda.conf, and a card missing from EGPU_VCUDA_GPUS runs unlimited.
 *
 * DESIGN: a CDI loader refuses a whole spec for an unknown key, an unknown
 * cdiVersion or one below what the fields need, and a runtime built on an
 * older CDI library knows no newer version; so cdiVersion is computed from
 * the fields (egpu__cdi_min_version: "0.5.0" for a claim UID starting with
 * a digit, "0.3.0" otherwise) and every spec is checked by the loader's
 * rules (egpu__cdi_spec_check) before it is written. Names follow SPEC.md's
 * stricter charset (no ':'), so every CDI parser version accepts them.
 * Writing goes through allocfs.c (temporary name, O_EXCL | O_NOFOLLOW,
 * renameat): the runtime sees the old spec or the new one, never half.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "allocdir_int.h"
#include "allocfs_int.h"
#include "cdi_int.h"

#define ENV_MAX (PATH_MAX + 64) /* one "NAME=VALUE" */

/* The versions a CDI loader knows (specs-go/version.go), oldest first. */
static const char *const versions[] = {"0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0",
                                       "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"};
enum { V030 = 2, V040, V050, V060, V070, V110 = 9 };

#define NAME_ALLOWED "letters, digits, '-', '_' or '.', the first a letter or a digit"
#define KIND_ALLOWED \
    "letters, digits, '-', '_' or '.', the first a letter, the last a letter or a digit"

static bool is_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Check v, the field named field, against a CDI name rule: 1..max
 * characters of letters, digits, '-', '_', '.'; with kind_rules (vendor,
 * class) the first a letter and the last a letter or digit, otherwise
 * (a device name) the first a letter or digit. */
static int check_label(const char *field, const char *v, size_t max, bool kind_rules,
                       struct egpu_error *err)
{
    const char *allowed = kind_rules ? KIND_ALLOWED : NAME_ALLOWED;
    size_t n;

    if (v == NULL || v[0] == '\0')
        return egpu_error_set(err, -EINVAL, "%s is empty (allowed: 1 to %zu %s)", field, max,
                              allowed);
    n = strlen(v);
    if (n > max)
        return egpu_error_set(err, -EINVAL,
                              "%s \"%.64s...\": %zu characters (allowed: 1 to %zu %s)", field, v, n,
                              max, allowed);
    for (size_t i = 0; i < n; i++) {
        char c = v[i];

        if (is_letter(c) || is_digit(c) || c == '-' || c == '_' || c == '.')
            continue;
        if (c > 0x20 && c < 0x7f)
            return egpu_error_set(
                err, -EINVAL, "%s \"%.128s\": '%c' at position %zu is not allowed (allowed: %s)",
                field, v, c, i, allowed);
        return egpu_error_set(err, -EINVAL,
                              "%s: byte 0x%02x at position %zu is not allowed (allowed: %s)", field,
                              (unsigned)(unsigned char)c, i, allowed);
    }
    if (kind_rules && (!is_letter(v[0]) || !(is_letter(v[n - 1]) || is_digit(v[n - 1]))))
        return egpu_error_set(err, -EINVAL,
                              "%s \"%.128s\": bad first or last character (allowed: %s)", field, v,
                              allowed);
    if (!kind_rules && !(is_letter(v[0]) || is_digit(v[0])))
        return egpu_error_set(err, -EINVAL, "%s \"%.128s\": bad first character (allowed: %s)",
                              field, v, allowed);
    return 0;
}

int egpu__cdi_check_uid(const char *uid, struct egpu_error *err)
{
    return check_label("claim UID", uid, EGPU_CDI_UID_LEN, false, err);
}

/* "k8s.<driver>" into out (EGPU_CDI_VENDOR_LEN + 1 bytes), checked. */
static int vendor_of(const char *driver, char *out, struct egpu_error *err)
{
    int w;

    if (driver == NULL || driver[0] == '\0')
        return egpu_error_set(err, -EINVAL, "driver name is empty (allowed: 1 to %zu %s)",
                              (size_t)EGPU_CDI_VENDOR_LEN - strlen(EGPU_CDI_VENDOR_PREFIX),
                              KIND_ALLOWED);
    w = snprintf(out, EGPU_CDI_VENDOR_LEN + 1, EGPU_CDI_VENDOR_PREFIX "%s", driver);
    if (w < 0 || w > EGPU_CDI_VENDOR_LEN)
        return egpu_error_set(err, -EINVAL,
                              "driver name \"%.64s...\": the CDI vendor " EGPU_CDI_VENDOR_PREFIX
                              "<driver> is longer than %d characters",
                              driver, EGPU_CDI_VENDOR_LEN);
    return check_label("driver name (CDI vendor " EGPU_CDI_VENDOR_PREFIX "<driver>)", out,
                       EGPU_CDI_VENDOR_LEN, true, err);
}

int egpu__cdi_spec_name(const char *driver, const char *uid, char *out, size_t len,
                        struct egpu_error *err)
{
    char vendor[EGPU_CDI_VENDOR_LEN + 1];
    int rc = vendor_of(driver, vendor, err), w;

    if (rc == 0)
        rc = egpu__cdi_check_uid(uid, err);
    if (rc)
        return rc;
    w = snprintf(out, len, "%s-%s_%s.json", vendor, EGPU_CDI_CLASS, uid);
    if (w < 0 || (size_t)w >= len || w > NAME_MAX)
        return egpu_error_set(err, -ENAMETOOLONG, "CDI spec file name %s-%s_%s.json too long",
                              vendor, EGPU_CDI_CLASS, uid);
    return 0;
}

int egpu__cdi_device_id(const char *driver, const char *uid, const char *device, char *out,
                        size_t len, struct egpu_error *err)
{
    char vendor[EGPU_CDI_VENDOR_LEN + 1];
    int rc = vendor_of(driver, vendor, err), w;

    if (rc == 0)
        rc = egpu__cdi_check_uid(uid, err);
    if (rc == 0)
        rc = check_label("device", device, EGPU_CDI_DEVICE_LEN, false, err);
    if (rc)
        return rc;
    w = snprintf(out, len, "%s/%s=%s-%s", vendor, EGPU_CDI_CLASS, uid, device);
    if (w < 0 || (size_t)w >= len)
        return egpu_error_set(err, -ENAMETOOLONG, "CDI device ID %s/%s=%s-%s too long", vendor,
                              EGPU_CDI_CLASS, uid, device);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Building                                                                 */

/* Append v (stolen; NULL: out of memory) to the array a; *oom on failure. */
static void add(json_t *a, json_t *v, bool *oom)
{
    if (v == NULL || json_array_append_new(a, v) != 0)
        *oom = true;
}

/* Append "NAME=VALUE" from a printf format to the array env. */
static void add_env(json_t *env, bool *oom, const char *fmt, ...) EGPU_PRINTF(3, 4);

static void add_env(json_t *env, bool *oom, const char *fmt, ...)
{
    char text[ENV_MAX];
    va_list ap;
    int w;

    va_start(ap, fmt);
    w = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof(text))
        *oom = true; /* the paths were checked against PATH_MAX: never here */
    else
        add(env, json_string(text), oom);
}

/* A bind mount of host at container, read-only or read-write, with the
 * options CDI passes on to the OCI spec. */
static json_t *bind_mount(const char *host, const char *container, bool ro)
{
    return json_pack("{s:s,s:s,s:[s,s,s,s]}", "hostPath", host, "containerPath", container,
                     "options", ro ? "ro" : "rw", "nosuid", "nodev", "bind");
}

/* A device node at the same path in the container, rw as allocate.c's
 * DeviceSpecs (the runtime reads type, major and minor from the host's). */
static json_t *device_node(const char *path)
{
    return json_pack("{s:s,s:s}", "path", path, "permissions", "rw");
}

/* Whether uuid can go into vcuda.conf and an env value: "GPU-" and hex
 * digits and '-' (no ',' or newline). */
static bool is_uuid(const char *uuid)
{
    size_t n = uuid != NULL ? strlen(uuid) : 0;

    if (n == 0 || n >= EGPU_UUID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(is_letter(uuid[i]) || is_digit(uuid[i]) || uuid[i] == '-'))
            return false;
    return true;
}

static bool is_abs_path(const char *p)
{
    return p != NULL && p[0] == '/' && strlen(p) < PATH_MAX - 32;
}

/* Check device i of c, and that no device before it has its name. */
static int check_device(const struct egpu__cdi_claim *c, size_t i, struct egpu_error *err)
{
    const struct egpu__cdi_device *d = &c->devices[i];
    int rc = check_label("device", d->device, EGPU_CDI_DEVICE_LEN, false, err);

    if (rc)
        return rc;
    for (size_t k = 0; k < i; k++)
        if (strcmp(c->devices[k].device, d->device) == 0)
            return egpu_error_set(err, -EINVAL,
                                  "device \"%s\" appears twice in claim %s (allowed: each device "
                                  "once)",
                                  d->device, c->claim_uid);
    if (!is_uuid(d->uuid))
        return egpu_error_set(err, -EINVAL,
                              "device %s: uuid \"%.64s\" is not a GPU UUID (allowed: letters, "
                              "digits and '-', e.g. GPU-<36 characters>)",
                              d->device, d->uuid != NULL ? d->uuid : "");
    if (d->core_pct < 1 || d->core_pct > 100)
        return egpu_error_set(err, -EINVAL, "device %s: core %u%% (allowed: 1 to 100)", d->device,
                              d->core_pct);
    if (d->core_limit != 0 && (d->core_limit < d->core_pct || d->core_limit > 100))
        return egpu_error_set(err, -EINVAL,
                              "device %s: core limit %u%% (allowed: the core, %u, to 100; 0 for "
                              "the core)",
                              d->device, d->core_limit, d->core_pct);
    if (d->core_pct < 100 && d->mem_mib == 0)
        return egpu_error_set(err, -EINVAL,
                              "device %s: memory 0 MiB with core %u%% (allowed: at least 1 MiB "
                              "for a share of a card)",
                              d->device, d->core_pct);
    if (!is_abs_path(d->alloc_dir))
        return egpu_error_set(err, -EINVAL,
                              "device %s: allocation dir \"%.128s\" (allowed: an absolute path "
                              "shorter than %d)",
                              d->device, d->alloc_dir != NULL ? d->alloc_dir : "", PATH_MAX - 32);
    return 0;
}

static int check_claim(const struct egpu__cdi_claim *c, char *vendor, struct egpu_error *err)
{
    bool shared = false;
    int rc = vendor_of(c->driver, vendor, err);

    if (rc == 0)
        rc = egpu__cdi_check_uid(c->claim_uid, err);
    if (rc)
        return rc;
    if (c->ndevices == 0 || c->ndevices > EGPU_CDI_DEVICES_MAX)
        return egpu_error_set(err, -EINVAL, "claim %s: %zu devices (allowed: 1 to %d)",
                              c->claim_uid, c->ndevices, EGPU_CDI_DEVICES_MAX);
    for (size_t i = 0; i < c->ndevices; i++) {
        rc = check_device(c, i, err);
        if (rc)
            return rc;
        shared = shared || c->devices[i].core_pct < 100;
    }
    /* Every device mounts its dir at /etc/elastic-gpu, and the interposer
     * reads the one vcuda.conf there: with a second device beside a share
     * in one container, one dir hides the other and the share's card would
     * run unlimited. Whole cards need no limits, so they may come in any
     * number. */
    for (size_t i = 0; shared && c->ndevices > 1 && i < c->ndevices; i++)
        if (c->devices[i].core_pct < 100)
            return egpu_error_set(err, -EINVAL,
                                  "claim %s: device %s shares its card (core %u%%) beside %zu "
                                  "other devices (allowed: a share alone in its claim, or whole "
                                  "cards only)",
                                  c->claim_uid, c->devices[i].device, c->devices[i].core_pct,
                                  c->ndevices - 1);
    if (shared && !is_abs_path(c->interposer))
        return egpu_error_set(err, -EINVAL,
                              "interposer \"%.128s\" (allowed: an absolute path shorter than %d)",
                              c->interposer != NULL ? c->interposer : "", PATH_MAX - 32);
    return 0;
}

/* The devices[] entry of device d of claim c. */
static json_t *device_entry(const struct egpu__cdi_claim *c, const struct egpu__cdi_device *d,
                            bool *oom)
{
    static const char shared_path[] = EGPU_ALLOCDIR_CONTAINER_DIR "/" EGPU_ALLOCDIR_SHARED_DIR;
    bool shared = d->core_pct < 100;
    json_t *env = json_array(), *nodes = json_array(), *mounts = json_array();
    char name[EGPU_CDI_UID_LEN + 1 + EGPU_CDI_DEVICE_LEN + 1], path[PATH_MAX];

    snprintf(name, sizeof(name), "%s-%s", c->claim_uid, d->device);
    add_env(env, oom, "EGPU_VCUDA_GPUS=%s", d->uuid);
    add_env(env, oom, "EGPU_VCUDA_CORE=%u", d->core_pct);
    add_env(env, oom, "EGPU_VCUDA_MEMORY_MIB=%u", d->mem_mib);
    add_env(env, oom, "EGPU_VCUDA_DIR=%s", EGPU_ALLOCDIR_CONTAINER_DIR);
    add_env(env, oom, "EGPU_VCUDA_CORE_LIMIT=%u", d->core_limit ? d->core_limit : d->core_pct);
    if (c->ctx_extra_mib > 0)
        add_env(env, oom, "EGPU_VCUDA_CONTEXT_EXTRA_MIB=%u", c->ctx_extra_mib);
    add_env(env, oom, EGPU_ALLOCDIR_ENV_DIR "=%s", EGPU_ALLOCDIR_CONTAINER_DIR);
    snprintf(path, sizeof(path), "/dev/nvidia%u", (unsigned)d->minor);
    add(nodes, device_node(path), oom);
    /* Parents before children: the runtime sorts by depth anyway. */
    add(mounts, bind_mount(d->alloc_dir, EGPU_ALLOCDIR_CONTAINER_DIR, true), oom);
    if (shared) {
        snprintf(path, sizeof(path), "%s/%s", d->alloc_dir, EGPU_ALLOCDIR_SHARED_DIR);
        add(mounts, bind_mount(path, shared_path, false), oom);
        snprintf(path, sizeof(path), "%s/%s", d->alloc_dir, EGPU_ALLOCDIR_PRELOAD_FILE);
        add(mounts, bind_mount(path, EGPU_ALLOCDIR_CONTAINER_PRELOAD, true), oom);
    }
    return json_pack("{s:s,s:{s:o,s:o,s:o}}", "name", name, "containerEdits", "env", env,
                     "deviceNodes", nodes, "mounts", mounts);
}

int egpu__cdi_spec_build(const struct egpu__cdi_claim *c, json_t **out, struct egpu_error *err)
{
    static const char *const ctl[] = {EGPU_ALLOCDIR_DEV_CTL, EGPU_ALLOCDIR_DEV_UVM,
                                      EGPU_ALLOCDIR_DEV_UVM_TOOLS};
    char vendor[EGPU_CDI_VENDOR_LEN + 1], kind[EGPU_CDI_VENDOR_LEN + 1 + EGPU_CDI_CLASS_LEN + 1];
    json_t *spec, *devices, *nodes, *edits;
    bool oom = false, shared = false;
    int rc = check_claim(c, vendor, err);

    if (rc)
        return rc;
    snprintf(kind, sizeof(kind), "%s/%s", vendor, EGPU_CDI_CLASS);
    devices = json_array();
    nodes = json_array();
    edits = json_object();
    for (size_t i = 0; i < c->ndevices; i++) {
        add(devices, device_entry(c, &c->devices[i], &oom), &oom);
        shared = shared || c->devices[i].core_pct < 100;
    }
    for (size_t i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++)
        add(nodes, device_node(ctl[i]), &oom);
    if (edits == NULL) {
        json_decref(nodes);
        oom = true;
    } else if (json_object_set_new(edits, "deviceNodes", nodes) != 0)
        oom = true;
    if (shared && edits != NULL) {
        json_t *mounts = json_array();

        add(mounts, bind_mount(c->interposer, c->interposer, true), &oom);
        if (json_object_set_new(edits, "mounts", mounts) != 0)
            oom = true;
    }
    /* cdiVersion first, as a reader expects; its value once the rest is known. */
    spec = json_pack("{s:s,s:s,s:o,s:o}", "cdiVersion", versions[V030], "kind", kind, "devices",
                     devices, "containerEdits", edits);
    if (spec == NULL || oom ||
        json_object_set_new(spec, "cdiVersion", json_string(egpu__cdi_min_version(spec))) != 0) {
        json_decref(spec);
        return egpu_error_set(err, -ENOMEM, "CDI spec of claim %s: out of memory", c->claim_uid);
    }
    *out = spec;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The loader's rules                                                       */

static int max_int(int a, int b)
{
    return a > b ? a : b;
}

/* The lowest version index the containerEdits object e needs. */
static int edits_version(const json_t *e)
{
    const json_t *v, *rdt = json_object_get(e, "intelRdt");
    int need = V030;
    size_t i;

    json_array_foreach(json_object_get(e, "mounts"), i, v)
    {
        if (json_object_get(v, "type") != NULL)
            need = max_int(need, V040);
    }
    json_array_foreach(json_object_get(e, "deviceNodes"), i, v)
    {
        if (json_object_get(v, "hostPath") != NULL)
            need = max_int(need, V050);
    }
    if (rdt != NULL)
        need = max_int(need, V070);
    if (json_object_get(rdt, "schemata") != NULL ||
        json_object_get(rdt, "enableMonitoring") != NULL)
        need = max_int(need, V110);
    if (json_object_get(e, "additionalGids") != NULL)
        need = max_int(need, V070);
    if (json_object_get(e, "netDevices") != NULL)
        need = max_int(need, V110);
    return need;
}

const char *egpu__cdi_min_version(const json_t *spec)
{
    const char *kind = json_string_value(json_object_get(spec, "kind"));
    const char *slash = kind != NULL ? strchr(kind, '/') : NULL;
    const json_t *d;
    int need = edits_version(json_object_get(spec, "containerEdits"));
    size_t i;

    if (slash != NULL && strchr(slash + 1, '.') != NULL)
        need = max_int(need, V060);
    if (json_object_get(spec, "annotations") != NULL)
        need = max_int(need, V060);
    json_array_foreach(json_object_get(spec, "devices"), i, d)
    {
        const char *name = json_string_value(json_object_get(d, "name"));

        if (name != NULL && is_digit(name[0]))
            need = max_int(need, V050);
        if (json_object_get(d, "annotations") != NULL)
            need = max_int(need, V060);
        need = max_int(need, edits_version(json_object_get(d, "containerEdits")));
    }
    return versions[need];
}

/* Whether every key of the object o is one of allowed (NULL-terminated);
 * otherwise -EINVAL naming where and the key. */
static int check_keys(const json_t *o, const char *where, const char *const *allowed,
                      const char *list, struct egpu_error *err)
{
    const char *key;
    const json_t *v;

    if (!json_is_object(o))
        return egpu_error_set(err, -EINVAL, "%s: not an object", where);
    json_object_foreach((json_t *)o, key, v)
    {
        bool known = false;

        for (const char *const *a = allowed; *a != NULL && !known; a++)
            known = strcmp(*a, key) == 0;
        if (!known)
            return egpu_error_set(err, -EINVAL, "%s: unknown key \"%.64s\" (allowed: %s)", where,
                                  key, list);
    }
    return 0;
}

static bool is_abs_string(const json_t *v)
{
    const char *s = json_string_value(v);

    return s != NULL && s[0] == '/';
}

static int check_node(const json_t *n, const char *where, struct egpu_error *err)
{
    static const char *const keys[] = {"path",     "hostPath",    "type", "major", "minor",
                                       "fileMode", "permissions", "uid",  "gid",   NULL};
    static const char *const numbers[] = {"major", "minor", "fileMode", "uid", "gid"};
    const char *perm = json_string_value(json_object_get(n, "permissions"));
    const json_t *type = json_object_get(n, "type");
    int rc = check_keys(n, where, keys,
                        "path, hostPath, type, major, minor, fileMode, permissions, uid, gid", err);

    if (rc)
        return rc;
    if (!is_abs_string(json_object_get(n, "path")))
        return egpu_error_set(err, -EINVAL, "%s: path missing or not absolute", where);
    if (type != NULL && (!json_is_string(type) || strlen(json_string_value(type)) != 1 ||
                         strchr("bcup", json_string_value(type)[0]) == NULL))
        return egpu_error_set(err, -EINVAL, "%s: type (allowed: b, c, u or p)", where);
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
        const json_t *v = json_object_get(n, numbers[i]);

        if (v != NULL && (!json_is_integer(v) || json_integer_value(v) < 0))
            return egpu_error_set(err, -EINVAL, "%s: %s (allowed: an integer, 0 or more)", where,
                                  numbers[i]);
    }
    if (perm != NULL && strspn(perm, "rwm") != strlen(perm) && strcmp(perm, "none") != 0)
        return egpu_error_set(
            err, -EINVAL, "%s: permissions \"%.16s\" (allowed: r, w and m, or none)", where, perm);
    return 0;
}

static int check_mount(const json_t *m, const char *where, struct egpu_error *err)
{
    static const char *const keys[] = {"hostPath", "containerPath", "options", "type", NULL};
    const json_t *o;
    size_t i;
    int rc = check_keys(m, where, keys, "hostPath, containerPath, options, type", err);

    if (rc)
        return rc;
    if (!json_is_string(json_object_get(m, "hostPath")) ||
        !json_is_string(json_object_get(m, "containerPath")))
        return egpu_error_set(err, -EINVAL, "%s: hostPath and containerPath are required", where);
    json_array_foreach(json_object_get(m, "options"), i, o)
    {
        if (!json_is_string(o))
            return egpu_error_set(err, -EINVAL, "%s: options[%zu] is not a string", where, i);
    }
    return 0;
}

static int check_hook(const json_t *h, const char *where, struct egpu_error *err)
{
    static const char *const keys[] = {"hookName", "path", "args", "env", "timeout", NULL};
    static const char *const names[] = {"createRuntime", "createContainer", "startContainer",
                                        "poststart", "poststop"};
    const char *name = json_string_value(json_object_get(h, "hookName"));
    bool known = false;
    int rc = check_keys(h, where, keys, "hookName, path, args, env, timeout", err);

    if (rc)
        return rc;
    for (size_t i = 0; name != NULL && i < sizeof(names) / sizeof(names[0]); i++)
        known = known || strcmp(name, names[i]) == 0;
    if (!known)
        return egpu_error_set(err, -EINVAL,
                              "%s: hookName (allowed: createRuntime, createContainer, "
                              "startContainer, poststart, poststop)",
                              where);
    if (!is_abs_string(json_object_get(h, "path")))
        return egpu_error_set(err, -EINVAL, "%s: path missing or not absolute", where);
    return 0;
}

/* Whether the containerEdits object e edits anything (a CDI loader refuses
 * a device without edits: "invalid device, empty device edits"). */
static bool has_edits(const json_t *e)
{
    static const char *const lists[] = {"env",    "deviceNodes",    "hooks",
                                        "mounts", "additionalGids", "netDevices"};

    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
        if (json_array_size(json_object_get(e, lists[i])) > 0)
            return true;
    return json_object_get(e, "intelRdt") != NULL;
}

/* Check the containerEdits object e (may be absent) found at where. */
static int check_edits(const json_t *e, const char *where, struct egpu_error *err)
{
    static const char *const keys[] = {"env",      "deviceNodes",    "hooks",      "mounts",
                                       "intelRdt", "additionalGids", "netDevices", NULL};
    char at[128];
    const json_t *v;
    size_t i;
    int rc;

    if (e == NULL)
        return 0;
    rc = check_keys(e, where, keys,
                    "env, deviceNodes, hooks, mounts, intelRdt, additionalGids, netDevices", err);
    for (size_t k = 0; rc == 0 && keys[k] != NULL; k++) {
        const json_t *l = json_object_get(e, keys[k]);

        if (l != NULL && strcmp(keys[k], "intelRdt") != 0 && !json_is_array(l))
            rc = egpu_error_set(err, -EINVAL, "%s.%s: not an array", where, keys[k]);
    }
    json_array_foreach(json_object_get(e, "env"), i, v)
    {
        const char *s = json_string_value(v);
        const char *eq = s != NULL ? strchr(s, '=') : NULL;

        if (rc == 0 && (eq == NULL || eq == s))
            rc = egpu_error_set(err, -EINVAL,
                                "%s.env[%zu]: \"%.64s\" (allowed: NAME=VALUE, NAME not empty)",
                                where, i, s != NULL ? s : "");
    }
    json_array_foreach(json_object_get(e, "deviceNodes"), i, v)
    {
        snprintf(at, sizeof(at), "%s.deviceNodes[%zu]", where, i);
        if (rc == 0)
            rc = check_node(v, at, err);
    }
    json_array_foreach(json_object_get(e, "mounts"), i, v)
    {
        snprintf(at, sizeof(at), "%s.mounts[%zu]", where, i);
        if (rc == 0)
            rc = check_mount(v, at, err);
    }
    json_array_foreach(json_object_get(e, "hooks"), i, v)
    {
        snprintf(at, sizeof(at), "%s.hooks[%zu]", where, i);
        if (rc == 0)
            rc = check_hook(v, at, err);
    }
    return rc;
}

static int version_index(const char *v)
{
    for (size_t i = 0; v != NULL && i < sizeof(versions) / sizeof(versions[0]); i++)
        if (strcmp(versions[i], v) == 0)
            return (int)i;
    return -1;
}

static int check_kind(const char *kind, struct egpu_error *err)
{
    char vendor[EGPU_CDI_VENDOR_LEN + 1];
    const char *slash = kind != NULL ? strchr(kind, '/') : NULL;
    size_t vl;
    int rc;

    if (slash == NULL)
        return egpu_error_set(err, -EINVAL, "kind \"%.64s\" (allowed: <vendor>/<class>)",
                              kind != NULL ? kind : "");
    vl = (size_t)(slash - kind);
    if (vl == 0 || vl > EGPU_CDI_VENDOR_LEN)
        return egpu_error_set(err, -EINVAL,
                              "kind \"%.64s\": vendor of %zu characters (allowed: 1 "
                              "to %d)",
                              kind, vl, EGPU_CDI_VENDOR_LEN);
    memcpy(vendor, kind, vl);
    vendor[vl] = '\0';
    rc = check_label("kind's vendor", vendor, EGPU_CDI_VENDOR_LEN, true, err);
    if (rc == 0)
        rc = check_label("kind's class", slash + 1, EGPU_CDI_CLASS_LEN, true, err);
    return rc;
}

int egpu__cdi_spec_check(const json_t *spec, struct egpu_error *err)
{
    static const char *const keys[] = {"cdiVersion", "kind",           "annotations",
                                       "devices",    "containerEdits", NULL};
    static const char *const dkeys[] = {"name", "annotations", "containerEdits", NULL};
    const char *version = json_string_value(json_object_get(spec, "cdiVersion"));
    const char *need = egpu__cdi_min_version(spec);
    const json_t *devices = json_object_get(spec, "devices"), *d;
    char at[64];
    size_t i;
    int rc = check_keys(spec, "spec", keys,
                        "cdiVersion, kind, annotations, devices, containerEdits", err);

    if (rc)
        return rc;
    if (version_index(version) < 0)
        return egpu_error_set(err, -EINVAL,
                              "cdiVersion \"%.16s\" (allowed: 0.1.0 ... 0.8.0, 1.0.0, 1.1.0)",
                              version != NULL ? version : "");
    if (version_index(version) < version_index(need))
        return egpu_error_set(err, -EINVAL, "cdiVersion %s: the fields need %s or later", version,
                              need);
    rc = check_kind(json_string_value(json_object_get(spec, "kind")), err);
    if (rc)
        return rc;
    if (!json_is_array(devices) || json_array_size(devices) == 0)
        return egpu_error_set(err, -EINVAL, "devices: missing or empty (allowed: 1 or more)");
    json_array_foreach(devices, i, d)
    {
        const char *name = json_string_value(json_object_get(d, "name"));

        snprintf(at, sizeof(at), "devices[%zu]", i);
        rc = check_keys(d, at, dkeys, "name, annotations, containerEdits", err);
        if (rc == 0)
            rc = check_label("device name", name, EGPU_CDI_ID_MAX, false, err);
        for (size_t k = 0; rc == 0 && k < i; k++)
            if (strcmp(json_string_value(json_object_get(json_array_get(devices, k), "name")),
                       name) == 0)
                rc = egpu_error_set(err, -EINVAL, "%s: name %.128s repeated", at, name);
        snprintf(at, sizeof(at), "devices[%zu].containerEdits", i);
        if (rc == 0 && !has_edits(json_object_get(d, "containerEdits")))
            rc = egpu_error_set(err, -EINVAL,
                                "%s: missing or empty (allowed: at least one edit per device)", at);
        if (rc == 0)
            rc = check_edits(json_object_get(d, "containerEdits"), at, err);
        if (rc)
            return rc;
    }
    return check_edits(json_object_get(spec, "containerEdits"), "containerEdits", err);
}

/* ------------------------------------------------------------------------ */
/* The spec file                                                            */

/* Open cdi_dir (O_DIRECTORY | O_NOFOLLOW) into *dfd; with missing_ok, a
 * dir that is not there is 1 and *dfd stays -1. */
static int open_cdi_dir(const char *cdi_dir, bool missing_ok, int *dfd, struct egpu_error *err)
{
    int rc = egpu__fs_open_dir(AT_FDCWD, cdi_dir, dfd);
    struct stat st;

    if (rc == -ENOENT && missing_ok)
        return 1;
    /* O_DIRECTORY wins over O_NOFOLLOW on Linux: a link is -ENOTDIR. */
    if (rc == -ENOTDIR && lstat(cdi_dir, &st) == 0 && S_ISLNK(st.st_mode))
        rc = -ELOOP;
    if (rc == -ELOOP)
        return egpu_error_set(err, rc, "CDI dir %s is a symbolic link: refused", cdi_dir);
    if (rc)
        return egpu_error_set(err, rc, "CDI dir %s: %s", cdi_dir, egpu_strerror(rc));
    return 0;
}

int egpu__cdi_spec_write(const char *cdi_dir, const struct egpu__cdi_claim *c,
                         char (*ids)[EGPU_CDI_ID_MAX], struct egpu_error *err)
{
    char name[NAME_MAX + 1];
    json_t *spec = NULL;
    char *text = NULL;
    struct stat st;
    size_t len;
    int rc, dfd = -1;

    rc = egpu__cdi_spec_build(c, &spec, err);
    if (rc == 0)
        rc = egpu__cdi_spec_check(spec, err);
    if (rc == 0)
        rc = egpu__cdi_spec_name(c->driver, c->claim_uid, name, sizeof(name), err);
    if (rc)
        goto out;
    text = json_dumps(spec, JSON_INDENT(2));
    len = text != NULL ? strlen(text) : 0;
    if (text == NULL) {
        rc = egpu_error_set(err, -ENOMEM, "CDI spec of claim %s: out of memory", c->claim_uid);
        goto out;
    }
    if (len > EGPU_CDI_SPEC_MAX) {
        rc = egpu_error_set(err, -EFBIG, "CDI spec of claim %s: %zu bytes (at most %d)",
                            c->claim_uid, len, EGPU_CDI_SPEC_MAX);
        goto out;
    }
    rc = egpu__allocdir_mkdir_p(cdi_dir);
    if (rc) {
        egpu_error_set(err, rc, "CDI dir %s cannot be created: %s", cdi_dir, egpu_strerror(rc));
        goto out;
    }
    rc = open_cdi_dir(cdi_dir, false, &dfd, err);
    if (rc)
        goto out;
    /* A runtime loads every spec in the dir: one others can write is theirs. */
    if (fstat(dfd, &st) != 0) {
        rc = egpu_error_errno(err, "CDI dir %s", cdi_dir);
        goto out;
    }
    if (!egpu__fs_is_private(&st)) {
        rc = egpu_error_set(err, -EPERM,
                            "CDI dir %s (uid %u, mode %04o) may be written by others: refused",
                            cdi_dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        goto out;
    }
    /* The rename would replace a link without following it; one planted at
     * the name is refused all the same, so whoever planted it shows. */
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
        rc = S_ISLNK(st.st_mode) ? -ELOOP : S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
        egpu_error_set(err, rc, "CDI spec %s/%s is %s, not a regular file: refused", cdi_dir, name,
                       rc == -ELOOP    ? "a symbolic link"
                       : rc == -EISDIR ? "a directory"
                                       : "special");
        goto out;
    }
    rc = egpu__fs_write_at(dfd, cdi_dir, name, text, len, 0644, err);
    /* The names were checked by the build and EGPU_CDI_ID_MAX fits any. */
    for (size_t i = 0; rc == 0 && i < c->ndevices; i++)
        rc = egpu__cdi_device_id(c->driver, c->claim_uid, c->devices[i].device, ids[i],
                                 EGPU_CDI_ID_MAX, err);
out:
    if (dfd >= 0)
        close(dfd);
    free(text);
    json_decref(spec);
    return rc;
}

int egpu__cdi_spec_remove(const char *cdi_dir, const char *driver, const char *uid,
                          struct egpu_error *err)
{
    char name[NAME_MAX + 1];
    int rc = egpu__cdi_spec_name(driver, uid, name, sizeof(name), err), dfd = -1;

    if (rc)
        return rc;
    rc = open_cdi_dir(cdi_dir, true, &dfd, err);
    if (rc)
        return rc > 0 ? 0 : rc; /* no dir, no spec: nothing was prepared here */
    if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT)
        rc = egpu_error_errno(err, "remove CDI spec %s/%s", cdi_dir, name);
    close(dfd);
    return rc;
}
