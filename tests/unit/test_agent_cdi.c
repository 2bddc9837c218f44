/* tests/unit/test_agent_cdi.c - the CDI spec of a prepared DRA claim
 * (src/agent/cdi.c).
 *
 * With the example values of shared/k8s-wire/dra/README.md (driver
 * gpu.elasticgpu.io, claim 4f1d2a9c-..., gpu-0 = GPU-fef8089b-..., 30 %
 * and 4096 MiB) the spec built matches cdi_spec_example.json field by field
 * where the inputs are the same (cdiVersion, kind, the device's name, its
 * limits in the env, its device node, the control nodes, the interposer,
 * the /etc/ld.so.preload mount's place and options), and has every key the
 * example has. Where the agent differs from the example's placeholders, by
 * design, the test says what it expects instead: the share's allocation dir
 * (allocdir.c's path) read-only at /etc/elastic-gpu, where the interposer
 * reads vcuda.conf, with shared/ read-write and the dir's own ld.so.preload
 * (device-plugin mode's layout, allocate.c). The example is read in place
 * (skipped when shared/ is not beside the checkout; a failure under
 * CI=true).
 *
 * No CDI schema is at hand offline, so the loader's rules of cdi_notes.md
 * are asserted: cdiVersion the minimum the fields need (0.5.0 for a name
 * starting with a digit, and each later field's version), the name
 * charset, the required and the known keys; the example passes the same
 * check. The file: written atomically (a new inode, mode 0644, nothing
 * left beside it), replaced, a link or directory at its name and a linked
 * or foreign-writable CDI dir refused (the link's target untouched),
 * removed idempotently; no fd is left open. Whole cards come in any number;
 * a share only alone in its claim. Bad input (claim UID, device,
 * driver, limits) is refused with a message naming the field and what is
 * allowed, and writes nothing.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "testjson.h"
#include "allocdir_int.h"
#include "allocfs_int.h"
#include "cdi_int.h"

#define EXAMPLE EGPU_SOURCE_DIR "/../shared/k8s-wire/dra/cdi_spec_example.json" /* in place */

#define DRIVER     "gpu.elasticgpu.io"
#define CLAIM_UID  "4f1d2a9c-8b3e-4c55-9a07-2e6b1d0c7f31"
#define SHARE_ID   "9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a95"
#define GPU0       "GPU-fef8089b-4820-abfc-e83e-94318197576e"
#define GPU1       "GPU-5b4c2e1a-9d3f-4a7b-8c6e-1f2a3b4c5d6e"
#define INTERPOSER "/opt/elasticgpu/lib/libegpu-vcuda.so" /* the example's */
#define ALLOC_ROOT "/var/lib/elastic-gpu/alloc"
#define SPEC_FILE  "k8s." DRIVER "-claim_" CLAIM_UID ".json"

static char root[64];
static char cdi_dir[128];
static long live_at_start;
static char share_dir[PATH_MAX];
static int fds_at_start;

/* Open fds of this process. */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static int setup(void **state)
{
    char *ids[] = {CLAIM_UID, SHARE_ID};

    (void)state;
    snprintf(root, sizeof(root), "/tmp/egpu-cdi-XXXXXX");
    if (mkdtemp(root) == NULL)
        return -1;
    snprintf(cdi_dir, sizeof(cdi_dir), "%s/run/cdi", root);
    /* The share's allocation dir by the agent's own rule (allocdir.c). */
    if (egpu__allocdir_path(ALLOC_ROOT, ids, 2, share_dir, sizeof(share_dir)) != 0)
        return -1;
    live_at_start = egpu_alloc_live();
    fds_at_start = open_fds();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(egpu_alloc_live(), live_at_start);
    assert_int_equal(open_fds(), fds_at_start); /* no fd left open, on success or failure */
    return egpu__fs_remove_tree(AT_FDCWD, root, 0) == 0 ? 0 : -1;
}

/* The README's claim: gpu-0 at 30 % and 4096 MiB. */
static struct egpu__cdi_device dev0(void)
{
    return (struct egpu__cdi_device){.device = "gpu-0",
                                     .uuid = GPU0,
                                     .minor = 0,
                                     .core_pct = 30,
                                     .mem_mib = 4096,
                                     .alloc_dir = share_dir};
}

static struct egpu__cdi_claim claim_of(const struct egpu__cdi_device *d, size_t n)
{
    return (struct egpu__cdi_claim){.driver = DRIVER,
                                    .claim_uid = CLAIM_UID,
                                    .interposer = INTERPOSER,
                                    .devices = d,
                                    .ndevices = n};
}

static json_t *load_example(void)
{
    json_error_t e;
    json_t *v;

    if (access(EXAMPLE, R_OK) != 0)
        tu_skip("shared/k8s-wire/dra/cdi_spec_example.json is not beside this checkout");
    v = json_load_file(EXAMPLE, 0, &e);
    if (v == NULL)
        fail_msg("%s: %s", EXAMPLE, e.text);
    return v;
}

static json_t *build(const struct egpu__cdi_claim *c)
{
    struct egpu_error err = {0};
    json_t *spec = NULL;

    if (egpu__cdi_spec_build(c, &spec, &err) != 0)
        fail_msg("build: %s", err.msg);
    return spec;
}

/* Every key of the example's object ex is in ours (same structure). */
static void has_keys_of(const json_t *ex, const json_t *ours, const char *where)
{
    const char *key;
    json_t *v;

    assert_true(json_is_object(ours));
    json_object_foreach((json_t *)ex, key, v)
    {
        if (json_object_get(ours, key) == NULL)
            fail_msg("%s: key %s of the example missing", where, key);
        if (json_typeof(v) != json_typeof(json_object_get(ours, key)))
            fail_msg("%s.%s: another JSON type than the example's", where, key);
    }
}

/* The value of NAME=... in the env array, or NULL. */
static const char *env_get(const json_t *env, const char *name)
{
    size_t n = strlen(name), i;
    json_t *v;

    json_array_foreach(env, i, v)
    {
        const char *s = json_string_value(v);

        if (strncmp(s, name, n) == 0 && s[n] == '=')
            return s + n + 1;
    }
    return NULL;
}

/* The mount of the array mounts at containerPath path, or NULL. */
static json_t *mount_at(const json_t *mounts, const char *path)
{
    size_t i;
    json_t *m;

    json_array_foreach(mounts, i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "containerPath")), path) == 0)
            return m;
    }
    return NULL;
}

static json_t *at(const json_t *o, const char *k1, const char *k2)
{
    json_t *v = json_object_get(o, k1);

    return k2 != NULL ? json_object_get(v, k2) : v;
}

static void test_spec_matches_example(void **state)
{
    struct egpu__cdi_device d = dev0();
    struct egpu__cdi_claim c = claim_of(&d, 1);
    json_t *ex = load_example(), *ours = build(&c);
    json_t *exd = json_array_get(json_object_get(ex, "devices"), 0);
    json_t *od = json_array_get(json_object_get(ours, "devices"), 0);
    json_t *ex_env = at(exd, "containerEdits", "env"), *env = at(od, "containerEdits", "env");
    json_t *ex_nodes, *nodes, *m, *exm, *ro;
    char path[PATH_MAX + 32];
    size_t i;
    json_t *v;

    (void)state;
    /* The structure: every key the example has, at each level. */
    has_keys_of(ex, ours, "spec");
    has_keys_of(exd, od, "devices[0]");
    has_keys_of(json_object_get(exd, "containerEdits"), json_object_get(od, "containerEdits"),
                "devices[0].containerEdits");
    has_keys_of(json_object_get(ex, "containerEdits"), json_object_get(ours, "containerEdits"),
                "containerEdits");
    /* The same inputs, the same values. */
    assert_string_equal(json_string_value(json_object_get(ours, "cdiVersion")),
                        json_string_value(json_object_get(ex, "cdiVersion")));
    assert_string_equal(json_string_value(json_object_get(ours, "kind")),
                        json_string_value(json_object_get(ex, "kind")));
    assert_int_equal(json_array_size(json_object_get(ours, "devices")),
                     json_array_size(json_object_get(ex, "devices")));
    assert_string_equal(json_string_value(json_object_get(od, "name")),
                        json_string_value(json_object_get(exd, "name")));
    json_array_foreach(ex_env, i, v)
    {
        const char *s = json_string_value(v), *eq = strchr(s, '=');
        char name[64];

        assert_non_null(eq);
        snprintf(name, sizeof(name), "%.*s", (int)(eq - s), s);
        assert_non_null(env_get(env, name));
        if (strcmp(name, "EGPU_VCUDA_DIR") == 0)
            assert_string_equal(env_get(env, name), EGPU_ALLOCDIR_CONTAINER_DIR);
        else
            assert_string_equal(env_get(env, name), eq + 1);
    }
    /* What vcuda.conf holds besides, and device-plugin mode's variable. */
    assert_string_equal(env_get(env, "EGPU_VCUDA_CORE_LIMIT"), "30");
    assert_string_equal(env_get(env, "EGPU_ALLOC_DIR"), EGPU_ALLOCDIR_CONTAINER_DIR);
    assert_null(env_get(env, "EGPU_VCUDA_CONTEXT_EXTRA_MIB"));
    /* Device nodes: the card's at device level, the control nodes at spec
     * level, each with every field of the example's, equal. */
    ex_nodes = at(exd, "containerEdits", "deviceNodes");
    nodes = at(od, "containerEdits", "deviceNodes");
    for (int level = 0; level < 2; level++) {
        assert_int_equal(json_array_size(nodes), json_array_size(ex_nodes));
        json_array_foreach(ex_nodes, i, v)
        {
            const char *key;
            json_t *f;

            json_object_foreach(v, key, f)
            {
                assert_true(json_equal(f, json_object_get(json_array_get(nodes, i), key)));
            }
            assert_string_equal(
                json_string_value(json_object_get(json_array_get(nodes, i), "permissions")), "rw");
        }
        ex_nodes = at(ex, "containerEdits", "deviceNodes");
        nodes = at(ours, "containerEdits", "deviceNodes");
    }
    /* The interposer: the same input, the same mount. */
    exm = mount_at(at(ex, "containerEdits", "mounts"), INTERPOSER);
    assert_non_null(exm);
    assert_true(json_equal(mount_at(at(ours, "containerEdits", "mounts"), INTERPOSER), exm));
    /* /etc/ld.so.preload: the example's options; the file is the share
     * dir's own (allocate.c writes it there), so it goes with the device. */
    exm = mount_at(at(ex, "containerEdits", "mounts"), "/etc/ld.so.preload");
    m = mount_at(at(od, "containerEdits", "mounts"), "/etc/ld.so.preload");
    assert_non_null(exm);
    assert_non_null(m);
    assert_true(json_equal(json_object_get(m, "options"), json_object_get(exm, "options")));
    snprintf(path, sizeof(path), "%s/%s", share_dir, EGPU_ALLOCDIR_PRELOAD_FILE);
    assert_string_equal(json_string_value(json_object_get(m, "hostPath")), path);
    /* The share's dir: allocdir.c's path, read-only where the interposer
     * reads vcuda.conf; its shared/ read-write, with the example's options. */
    exm = json_array_get(at(exd, "containerEdits", "mounts"), 0);
    m = mount_at(at(od, "containerEdits", "mounts"), EGPU_ALLOCDIR_CONTAINER_DIR);
    assert_non_null(m);
    has_keys_of(exm, m, "the share's mount");
    assert_string_equal(json_string_value(json_object_get(m, "hostPath")), share_dir);
    ro = tu_json("['ro', 'nosuid', 'nodev', 'bind']");
    assert_true(json_equal(json_object_get(m, "options"), ro));
    json_decref(ro);
    m = mount_at(at(od, "containerEdits", "mounts"),
                 EGPU_ALLOCDIR_CONTAINER_DIR "/" EGPU_ALLOCDIR_SHARED_DIR);
    assert_non_null(m);
    snprintf(path, sizeof(path), "%s/%s", share_dir, EGPU_ALLOCDIR_SHARED_DIR);
    assert_string_equal(json_string_value(json_object_get(m, "hostPath")), path);
    assert_true(json_equal(json_object_get(m, "options"), json_object_get(exm, "options")));
    assert_int_equal(json_array_size(at(od, "containerEdits", "mounts")), 3);
    json_decref(ours);
    json_decref(ex);
}

/* Check spec, expecting rc and, when failing, want in the message. */
static void check_is(const json_t *spec, int rc, const char *want)
{
    struct egpu_error err = {0};

    assert_int_equal(egpu__cdi_spec_check(spec, &err), rc);
    if (want != NULL && strstr(err.msg, want) == NULL)
        fail_msg("\"%s\" not in \"%s\"", want, err.msg);
}

static void test_spec_follows_cdi_rules(void **state)
{
    struct egpu__cdi_device d = dev0();
    struct egpu__cdi_claim c = claim_of(&d, 1);
    json_t *ex = load_example(), *ours = build(&c), *t, *dev;

    (void)state;
    /* Both pass the loader's rules; the version is the minimum needed:
     * 0.5.0 for a device name that starts with a digit. */
    check_is(ex, 0, NULL);
    check_is(ours, 0, NULL);
    assert_string_equal(egpu__cdi_min_version(ex), "0.5.0");
    assert_string_equal(egpu__cdi_min_version(ours), "0.5.0");
    assert_string_equal(json_string_value(json_object_get(ours, "cdiVersion")), "0.5.0");
    json_decref(ours);
    /* A claim UID starting with a letter needs no more than the base. */
    c.claim_uid = "a4f1d2a9c-8b3e-4c55-9a07-2e6b1d0c7f31";
    ours = build(&c);
    assert_string_equal(json_string_value(json_object_get(ours, "cdiVersion")), "0.3.0");
    check_is(ours, 0, NULL);
    /* Each later field raises the minimum, and a lower cdiVersion fails. */
    t = json_deep_copy(ours);
    dev = json_array_get(json_object_get(t, "devices"), 0);
    json_object_set_new(json_array_get(at(dev, "containerEdits", "mounts"), 0), "type",
                        json_string("none"));
    assert_string_equal(egpu__cdi_min_version(t), "0.4.0");
    check_is(t, -EINVAL, "cdiVersion 0.3.0: the fields need 0.4.0");
    json_object_set_new(json_array_get(at(dev, "containerEdits", "deviceNodes"), 0), "hostPath",
                        json_string("/dev/nvidia0"));
    assert_string_equal(egpu__cdi_min_version(t), "0.5.0");
    json_object_set_new(dev, "annotations", json_pack("{s:s}", "a", "b"));
    assert_string_equal(egpu__cdi_min_version(t), "0.6.0");
    json_object_set_new(json_object_get(t, "containerEdits"), "additionalGids",
                        json_pack("[i]", 5));
    assert_string_equal(egpu__cdi_min_version(t), "0.7.0");
    json_object_set_new(json_object_get(t, "containerEdits"), "netDevices", json_array());
    assert_string_equal(egpu__cdi_min_version(t), "1.1.0");
    json_object_set_new(t, "cdiVersion", json_string("1.1.0"));
    check_is(t, 0, NULL);
    json_object_set_new(t, "cdiVersion", json_string("1.2.0"));
    check_is(t, -EINVAL, "cdiVersion \"1.2.0\"");
    json_decref(t);
    /* Required keys, known keys, the name charset, env entries. */
    t = json_deep_copy(ours);
    json_object_del(t, "kind");
    check_is(t, -EINVAL, "kind");
    json_object_set_new(t, "kind", json_string("k8s.gpu.elasticgpu.io/claim/x"));
    check_is(t, -EINVAL, "kind's class");
    json_object_set_new(t, "kind", json_string("foo"));
    check_is(t, -EINVAL, "<vendor>/<class>");
    json_decref(t);
    t = json_deep_copy(ours);
    json_object_set_new(t, "devices", json_array());
    check_is(t, -EINVAL, "devices");
    json_decref(t);
    t = json_deep_copy(ours);
    json_object_set_new(t, "extra", json_true());
    check_is(t, -EINVAL, "unknown key \"extra\"");
    json_decref(t);
    t = json_deep_copy(ours);
    dev = json_array_get(json_object_get(t, "devices"), 0);
    json_object_set_new(dev, "name", json_string("a:b/c"));
    check_is(t, -EINVAL, "device name \"a:b/c\": ':'");
    json_object_set_new(dev, "name", json_string("-a"));
    check_is(t, -EINVAL, "bad first character");
    json_decref(t);
    t = json_deep_copy(ours);
    dev = json_array_get(json_object_get(t, "devices"), 0);
    json_array_append_new(at(dev, "containerEdits", "env"), json_string("=x"));
    check_is(t, -EINVAL, "env[6]");
    json_object_set_new(json_object_get(dev, "containerEdits"), "env", json_string("A=b"));
    check_is(t, -EINVAL, "devices[0].containerEdits.env: not an array");
    json_decref(t);
    t = json_deep_copy(ours);
    json_object_del(json_array_get(json_object_get(t, "devices"), 0), "containerEdits");
    check_is(t, -EINVAL, "devices[0].containerEdits: missing or empty");
    json_decref(t);
    t = json_deep_copy(ours);
    json_object_set_new(json_array_get(at(t, "containerEdits", "deviceNodes"), 0), "type",
                        json_string("x"));
    check_is(t, -EINVAL, "containerEdits.deviceNodes[0]: type");
    json_object_set_new(json_array_get(at(t, "containerEdits", "deviceNodes"), 0), "type",
                        json_string("c"));
    json_object_set_new(json_array_get(at(t, "containerEdits", "deviceNodes"), 0), "major",
                        json_string("195"));
    check_is(t, -EINVAL, "containerEdits.deviceNodes[0]: major");
    json_decref(t);
    t = json_deep_copy(ours);
    json_object_set_new(json_array_get(at(t, "containerEdits", "deviceNodes"), 0), "permissions",
                        json_string("rwx"));
    check_is(t, -EINVAL, "containerEdits.deviceNodes[0]: permissions");
    json_decref(t);
    t = json_deep_copy(ours);
    json_object_del(json_array_get(at(t, "containerEdits", "mounts"), 0), "hostPath");
    check_is(t, -EINVAL, "containerEdits.mounts[0]: hostPath and containerPath");
    json_decref(t);
    json_decref(ours);
    json_decref(ex);
}

/* The names in cdi_dir (without . and ..), joined by ' ', into out. */
static void dir_names(const char *dir, char *out, size_t len)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t used = 0;

    out[0] = '\0';
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        used += (size_t)snprintf(out + used, len - used, "%s%s", used ? " " : "", e->d_name);
        assert_true(used < len);
    }
    closedir(d);
}

static json_t *load_file(const char *path)
{
    json_error_t e;
    json_t *v = json_load_file(path, 0, &e);

    if (v == NULL)
        fail_msg("%s: %s", path, e.text);
    return v;
}

static void test_write_replaces_atomically(void **state)
{
    struct egpu__cdi_device d = dev0();
    struct egpu__cdi_claim c = claim_of(&d, 1);
    char ids[1][EGPU_CDI_ID_MAX], path[256], names[512];
    struct egpu_error err = {0};
    struct stat st1, st2;
    json_t *spec, *got;

    (void)state;
    snprintf(path, sizeof(path), "%s/%s", cdi_dir, SPEC_FILE);
    if (egpu__cdi_spec_write(cdi_dir, &c, ids, &err) != 0)
        fail_msg("write: %s", err.msg);
    assert_string_equal(ids[0], "k8s.gpu.elasticgpu.io/claim=" CLAIM_UID "-gpu-0");
    assert_int_equal(stat(path, &st1), 0);
    assert_int_equal(st1.st_mode & 07777, 0644);
    assert_true(S_ISREG(st1.st_mode));
    assert_int_equal(stat(cdi_dir, &st2), 0);
    assert_int_equal(st2.st_mode & 07777, 0755);
    got = load_file(path);
    spec = build(&c);
    assert_true(json_equal(got, spec));
    json_decref(got);
    json_decref(spec);
    /* Again with another share: a new file renamed over the old one (a
     * new inode), and nothing else left in the dir. */
    d.core_pct = 50;
    d.mem_mib = 8192;
    if (egpu__cdi_spec_write(cdi_dir, &c, ids, &err) != 0)
        fail_msg("write: %s", err.msg);
    assert_int_equal(stat(path, &st2), 0);
    assert_true(st1.st_ino != st2.st_ino);
    assert_int_equal(st2.st_mode & 07777, 0644);
    got = load_file(path);
    assert_string_equal(
        env_get(at(json_array_get(json_object_get(got, "devices"), 0), "containerEdits", "env"),
                "EGPU_VCUDA_CORE"),
        "50");
    json_decref(got);
    dir_names(cdi_dir, names, sizeof(names));
    assert_string_equal(names, SPEC_FILE);
}

static void test_write_refuses_links(void **state)
{
    struct egpu__cdi_device d = dev0();
    struct egpu__cdi_claim c = claim_of(&d, 1);
    char ids[1][EGPU_CDI_ID_MAX], path[256], victim[256], link_dir[256];
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu__allocdir_mkdir_p(cdi_dir), 0);
    snprintf(path, sizeof(path), "%s/%s", cdi_dir, SPEC_FILE);
    snprintf(victim, sizeof(victim), "%s/victim", root);
    /* A link at the spec's name: refused, its target untouched. */
    tu_plant(path, victim, 0);
    assert_int_equal(egpu__cdi_spec_write(cdi_dir, &c, ids, &err), -ELOOP);
    assert_non_null(strstr(err.msg, "symbolic link"));
    assert_non_null(strstr(err.msg, SPEC_FILE));
    tu_victim_intact(victim);
    assert_int_equal(unlink(path), 0);
    /* A directory there. */
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(egpu__cdi_spec_write(cdi_dir, &c, ids, &err), -EISDIR);
    assert_non_null(strstr(err.msg, "a directory"));
    assert_int_equal(rmdir(path), 0);
    /* The CDI dir a link to a dir. */
    snprintf(link_dir, sizeof(link_dir), "%s/linked", root);
    assert_int_equal(symlink(cdi_dir, link_dir), 0);
    assert_int_equal(egpu__cdi_spec_write(link_dir, &c, ids, &err), -ELOOP);
    assert_non_null(strstr(err.msg, "CDI dir"));
    assert_int_equal(egpu__cdi_spec_remove(link_dir, DRIVER, CLAIM_UID, &err), -ELOOP);
    /* A CDI dir others may write: a spec there could be anyone's. */
    assert_int_equal(chmod(cdi_dir, 0777), 0);
    assert_int_equal(egpu__cdi_spec_write(cdi_dir, &c, ids, &err), -EPERM);
    assert_non_null(strstr(err.msg, "may be written by others"));
    assert_int_equal(chmod(cdi_dir, 0755), 0);
    assert_int_equal(access(path, F_OK), -1);
}

static void test_remove_is_idempotent(void **state)
{
    struct egpu__cdi_device d = dev0();
    struct egpu__cdi_claim c = claim_of(&d, 1);
    char ids[1][EGPU_CDI_ID_MAX], path[256], names[512];
    struct egpu_error err = {0};

    (void)state;
    /* No dir at all: an unknown claim is success. */
    assert_int_equal(egpu__cdi_spec_remove(cdi_dir, DRIVER, CLAIM_UID, &err), 0);
    assert_int_equal(egpu__cdi_spec_write(cdi_dir, &c, ids, &err), 0);
    snprintf(path, sizeof(path), "%s/%s", cdi_dir, SPEC_FILE);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(egpu__cdi_spec_remove(cdi_dir, DRIVER, CLAIM_UID, &err), 0);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(egpu__cdi_spec_remove(cdi_dir, DRIVER, CLAIM_UID, &err), 0);
    dir_names(cdi_dir, names, sizeof(names));
    assert_string_equal(names, "");
    /* A bad UID never reaches the file system. */
    assert_int_equal(egpu__cdi_spec_remove(cdi_dir, DRIVER, "../x", &err), -EINVAL);
    assert_non_null(strstr(err.msg, "claim UID"));
}

/* Writing c fails with -EINVAL, the message holding want and "allowed",
 * and nothing is written. */
static void expect_refused(const struct egpu__cdi_claim *c, const char *want)
{
    char ids[EGPU_CDI_DEVICES_MAX][EGPU_CDI_ID_MAX];
    struct egpu_error err = {0};

    assert_int_equal(egpu__cdi_spec_write(cdi_dir, c, ids, &err), -EINVAL);
    if (strstr(err.msg, want) == NULL || strstr(err.msg, "allowed") == NULL)
        fail_msg("\"%s\" and \"allowed\" not in \"%s\"", want, err.msg);
    assert_int_equal(access(cdi_dir, F_OK), -1);
}

static void test_bad_input_refused(void **state)
{
    struct egpu__cdi_device d[2] = {dev0(), dev0()};
    struct egpu__cdi_claim c = claim_of(d, 1);
    struct egpu_error err = {0};
    char uid[EGPU_CDI_UID_LEN + 2];

    (void)state;
    c.claim_uid = "../../etc/passwd";
    expect_refused(&c, "claim UID \"../../etc/passwd\": '/' at position 2");
    c.claim_uid = "";
    expect_refused(&c, "claim UID is empty");
    c.claim_uid = "-4f1d";
    expect_refused(&c, "claim UID \"-4f1d\": bad first character");
    c.claim_uid = "4f1d\n";
    expect_refused(&c, "claim UID: byte 0x0a at position 4");
    memset(uid, 'a', sizeof(uid) - 1);
    uid[sizeof(uid) - 1] = '\0';
    c.claim_uid = uid;
    expect_refused(&c, "claim UID");
    assert_int_equal(egpu__cdi_check_uid(CLAIM_UID, &err), 0);
    c.claim_uid = CLAIM_UID;
    c.driver = "gpu.elasticgpu.io.";
    expect_refused(&c, "driver name");
    c.driver = DRIVER;
    d[0].device = "gpu:0";
    expect_refused(&c, "device \"gpu:0\"");
    d[0].device = "gpu-0";
    d[0].core_pct = 0;
    expect_refused(&c, "device gpu-0: core 0%");
    d[0].core_pct = 30;
    d[0].core_limit = 20;
    expect_refused(&c, "core limit 20%");
    d[0].core_limit = 0;
    d[0].mem_mib = 0;
    expect_refused(&c, "memory 0 MiB");
    d[0].mem_mib = 4096;
    d[0].uuid = "GPU-a,GPU-b";
    expect_refused(&c, "uuid");
    d[0].uuid = GPU0;
    d[0].alloc_dir = "relative";
    expect_refused(&c, "allocation dir");
    d[0].alloc_dir = share_dir;
    c.interposer = NULL;
    expect_refused(&c, "interposer");
    c.interposer = INTERPOSER;
    c.ndevices = 2;
    expect_refused(&c, "appears twice");
    c.ndevices = 0;
    expect_refused(&c, "0 devices");
}

static void test_whole_cards_and_a_share(void **state)
{
    struct egpu__cdi_device d[2] = {dev0(), dev0()};
    struct egpu__cdi_claim c = claim_of(d, 2);
    char ids[2][EGPU_CDI_ID_MAX];
    struct egpu_error err = {0};
    json_t *spec, *dev, *mounts;

    (void)state;
    /* Two whole cards: each its node and its dir, no shared/, no preload,
     * no interposer at all. */
    for (int i = 0; i < 2; i++) {
        d[i].core_pct = 100;
        d[i].mem_mib = 81559;
    }
    d[1].device = "gpu-1";
    d[1].uuid = GPU1;
    d[1].minor = 1;
    spec = build(&c);
    check_is(spec, 0, NULL);
    for (size_t i = 0; i < 2; i++) {
        dev = json_array_get(json_object_get(spec, "devices"), i);
        mounts = at(dev, "containerEdits", "mounts");
        assert_int_equal(json_array_size(mounts), 1);
        assert_non_null(mount_at(mounts, EGPU_ALLOCDIR_CONTAINER_DIR));
        assert_string_equal(env_get(at(dev, "containerEdits", "env"), "EGPU_VCUDA_CORE"), "100");
        assert_string_equal(env_get(at(dev, "containerEdits", "env"), "EGPU_VCUDA_MEMORY_MIB"),
                            "81559");
    }
    assert_string_equal(json_string_value(json_object_get(dev, "name")), CLAIM_UID "-gpu-1");
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(at(dev, "containerEdits", "deviceNodes"), 0), "path")),
                        "/dev/nvidia1");
    assert_string_equal(env_get(at(dev, "containerEdits", "env"), "EGPU_VCUDA_GPUS"), GPU1);
    assert_null(at(spec, "containerEdits", "mounts"));
    json_decref(spec);
    assert_int_equal(egpu__cdi_spec_write(cdi_dir, &c, ids, &err), 0);
    assert_string_equal(ids[0], "k8s.gpu.elasticgpu.io/claim=" CLAIM_UID "-gpu-0");
    assert_string_equal(ids[1], "k8s.gpu.elasticgpu.io/claim=" CLAIM_UID "-gpu-1");
    /* A share beside another device: one dir at /etc/elastic-gpu would
     * hide the other's vcuda.conf, so the claim is refused. */
    d[1].core_pct = 40;
    d[1].mem_mib = 2048;
    d[1].core_limit = 60;
    assert_int_equal(egpu__cdi_spec_build(&c, &spec, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "device gpu-1 shares its card"));
    assert_non_null(strstr(err.msg, "allowed: a share alone in its claim"));
    /* The share alone: its limits, the context extra, its preload. */
    c.devices = &d[1];
    c.ndevices = 1;
    c.ctx_extra_mib = 300;
    spec = build(&c);
    check_is(spec, 0, NULL);
    dev = json_array_get(json_object_get(spec, "devices"), 0);
    assert_string_equal(env_get(at(dev, "containerEdits", "env"), "EGPU_VCUDA_CORE"), "40");
    assert_string_equal(env_get(at(dev, "containerEdits", "env"), "EGPU_VCUDA_CORE_LIMIT"), "60");
    assert_string_equal(env_get(at(dev, "containerEdits", "env"), "EGPU_VCUDA_CONTEXT_EXTRA_MIB"),
                        "300");
    assert_non_null(mount_at(at(dev, "containerEdits", "mounts"), "/etc/ld.so.preload"));
    assert_int_equal(json_array_size(at(spec, "containerEdits", "mounts")), 1);
    json_decref(spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_spec_matches_example, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spec_follows_cdi_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_replaces_atomically, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_refuses_links, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_is_idempotent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_input_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_whole_cards_and_a_share, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
