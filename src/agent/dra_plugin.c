/* agent/dra_plugin.c - the DRA kubelet plugin's DRAPlugin service:
 * NodePrepareResources and NodeUnprepareResources, v1 and v1beta1
 * (dra_plugin_int.h), served by the project's gRPC server
 * (src/net/grpc_server.c) as the registration is (dra_registration.c).
 *
 * Wire facts: ../shared/k8s-wire/dra/kubelet_plugin_notes.md (sections 3
 * and 4) and dra_notes.md. v1beta1's messages are v1's without
 * Device.share_id (field 5), so both versions are decoded and answered with
 * v1's descriptors; share_id is only set in v1 answers.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dra/v1/api.pb-c.h"
#include "egpu/api.h"
#include "egpu/log.h"
#include "allocdir_int.h"
#include "allocfs_int.h"
#include "cdi_int.h"
#include "container_int.h"
#include "dra_plugin_int.h"
#include "pb_int.h"

struct egpu__dra_plugin {
    struct egpu_kube *kube;
    char *node;
    char *driver;
    char *endpoint;
    char *dra_root; /* <alloc_root>/dra */
    char *cdi_dir;
    char *interposer;
    unsigned ctx_extra_mib;
    struct egpu_grpc_server *srv;
    bool running;
    pthread_mutex_t lock; /* serializes prepare and unprepare; guards cards */
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    size_t ncards;
    pthread_mutex_t stats_lock; /* guards stats and usage (held briefly, never with lock waited) */
    struct egpu__dra_plugin_stats stats;
    struct egpu__dra_usage usage; /* the sums as last made (usage_update) */
};

static void usage_update(struct egpu__dra_plugin *p);

/* ------------------------------------------------------------------------ */
/* The record                                                               */

/* The record's file name of uid (checked by egpu__cdi_check_uid) into out. */
static void record_name(const char *uid, char *out, size_t len)
{
    snprintf(out, len, "%s%s.json", EGPU_DRA_PLUGIN_RECORD_PREFIX, uid);
}

/* Open <alloc_root>/dra (made when missing) into *fd. Returns 0 or -errno
 * with err. */
static int open_root(struct egpu__dra_plugin *p, bool create, int *fd, struct egpu_error *err)
{
    int rc = create ? egpu__allocdir_mkdir_p(p->dra_root) : 0;

    if (rc == 0)
        rc = egpu__fs_open_dir(AT_FDCWD, p->dra_root, fd);
    if (rc && !(rc == -ENOENT && !create))
        egpu_error_set(err, rc, "DRA allocation root %s: %s", p->dra_root, egpu_strerror(rc));
    return rc;
}

/* Whether v is a string member key of o that is not empty. */
static const char *rec_str(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));

    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* Whether a record device's capacity member v is absent, or an integer
 * 1..max. */
static bool capacity_ok(const json_t *v, json_int_t max)
{
    return v == NULL ||
           (json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= max);
}

int egpu__dra_plugin_record_parse(const char *driver, const char *dra_root, const char *uid,
                                  const char *text, size_t len, json_t **rec,
                                  struct egpu_error *err)
{
    char id[EGPU_CDI_ID_MAX], dir[PATH_MAX];
    char *ids[1] = {id};
    json_error_t jerr;
    const json_t *devs, *d;
    const char *got;
    json_t *doc;
    size_t i;

    doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL || !json_is_object(doc)) {
        json_decref(doc);
        return egpu_error_set(err, EGPU_ESYNTAX, "not a claim record: not a JSON object");
    }
    got = rec_str(doc, "uid");
    devs = json_object_get(doc, "devices");
    if (got == NULL || strcmp(got, uid) != 0 || rec_str(doc, "namespace") == NULL ||
        rec_str(doc, "name") == NULL || !json_is_array(devs) || json_array_size(devs) == 0 ||
        json_array_size(devs) > EGPU_CDI_DEVICES_MAX) {
        json_decref(doc);
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "not a claim record of uid %s: uid, namespace, name or "
                              "devices (1..%d) missing or other",
                              uid, EGPU_CDI_DEVICES_MAX);
    }
    /* Each device's CDI ID and dir must be the ones this claim and device
     * give (the dir is what unprepare removes, so a record naming any other
     * path is refused, never followed). */
    json_array_foreach(devs, i, d)
    {
        const char *device = rec_str(d, "device"), *share;
        struct egpu_error e2 = {0};

        if (!json_is_object(d) || device == NULL ||
            !json_is_string(json_object_get(d, "request")) || rec_str(d, "pool") == NULL ||
            !json_is_string(json_object_get(d, "shareID")) || rec_str(d, "cdi") == NULL ||
            rec_str(d, "dir") == NULL ||
            egpu__cdi_device_id(driver, uid, device, id, sizeof(id), &e2) != 0 ||
            egpu__allocdir_path(dra_root, ids, 1, dir, sizeof(dir)) != 0 ||
            strcmp(id, rec_str(d, "cdi")) != 0 || strcmp(dir, rec_str(d, "dir")) != 0) {
            json_decref(doc);
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "not a claim record of uid %s: device %zu is not one this "
                                  "agent writes",
                                  uid, i);
        }
        if (!capacity_ok(json_object_get(d, "cores"), 100) ||
            !capacity_ok(json_object_get(d, "memoryMiB"), INT64_MAX)) {
            json_decref(doc);
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "not a claim record of uid %s: device %zu's cores (1..100) or "
                                  "memoryMiB (>= 1) is not an integer in range",
                                  uid, i);
        }
        share = json_string_value(json_object_get(d, "shareID"));
        if (share[0] != '\0' && !egpu_api_dra_is_share_id(share)) {
            json_decref(doc);
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "not a claim record of uid %s: device %zu's shareID is not a UID",
                                  uid, i);
        }
    }
    *rec = doc;
    return 0;
}

/* Whether rc, from record_read, says the record's entry is there but is not
 * a record the agent wrote (a link, garbage, another owner, a directory):
 * prepare rebuilds it, unprepare removes it. */
static bool is_bad_record(int rc)
{
    return rc == EGPU_ESYNTAX || rc == -EPERM || rc == -ELOOP || rc == -EINVAL || rc == -EFBIG ||
           rc == -EISDIR;
}

/* The record of uid from the disk into *rec (new reference). Returns 0,
 * -ENOENT (none), a code is_bad_record accepts (an entry that is not the
 * agent's record: a symbolic link is never followed), or another negative
 * code, with err. */
static int record_read(struct egpu__dra_plugin *p, const char *uid, json_t **rec,
                       struct egpu_error *err)
{
    char name[EGPU_CDI_UID_LEN + 32], *text = NULL;
    struct egpu_error e2 = {0};
    struct stat st;
    size_t len;
    int fd, rc;

    rc = open_root(p, false, &fd, err);
    if (rc)
        return rc;
    record_name(uid, name, sizeof(name));
    rc = egpu__fs_read_at(fd, name, EGPU_DRA_PLUGIN_RECORD_MAX, &text, &len, &st);
    close(fd);
    if (rc == -ENOENT)
        return rc;
    if (rc)
        return egpu_error_set(err, rc, "DRA claim record %s/%s: %s", p->dra_root, name,
                              egpu_strerror(rc));
    if (!egpu__fs_is_private(&st)) {
        egpu_free(text);
        return egpu_error_set(err, -EPERM, "DRA claim record %s/%s: not the agent's file",
                              p->dra_root, name);
    }
    rc = egpu__dra_plugin_record_parse(p->driver, p->dra_root, uid, text, len, rec, &e2);
    egpu_free(text);
    if (rc)
        egpu_error_set(err, rc, "DRA claim record %s/%s: %s", p->dra_root, name, e2.msg);
    return rc;
}

/* Remove uid's record entry, whatever it is (a link is removed, never
 * followed). Returns 0 or a negative code with err. */
static int record_remove(struct egpu__dra_plugin *p, const char *uid, struct egpu_error *err)
{
    char name[EGPU_CDI_UID_LEN + 32];
    int fd, rc = open_root(p, false, &fd, err);

    if (rc == -ENOENT)
        return 0;
    if (rc)
        return rc;
    record_name(uid, name, sizeof(name));
    rc = egpu__fs_remove_tree(fd, name, 0);
    close(fd);
    if (rc)
        return egpu_error_set(err, rc, "DRA claim record %s/%s: %s", p->dra_root, name,
                              egpu_strerror(rc));
    return 0;
}

/* Write rec as uid's record. Returns 0 or a negative code with err. */
static int record_write(struct egpu__dra_plugin *p, const char *uid, const json_t *rec,
                        struct egpu_error *err)
{
    char name[EGPU_CDI_UID_LEN + 32];
    char *text = json_dumps(rec, JSON_COMPACT);
    int fd = -1, rc;

    if (text == NULL)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    rc = open_root(p, true, &fd, err);
    if (rc == 0) {
        record_name(uid, name, sizeof(name));
        rc = egpu__fs_write_at(fd, p->dra_root, name, text, strlen(text), 0644, err);
        close(fd);
    }
    free(text);
    return rc;
}

/* Remove the allocation dirs a record (or a half-made one) names. Returns
 * 0 or the first failure's negative code (the rest are still removed). */
static int remove_dirs(struct egpu__dra_plugin *p, const json_t *devices)
{
    size_t i;
    json_t *d;
    int first = 0;

    json_array_foreach(devices, i, d)
    {
        const char *dir = json_string_value(json_object_get(d, "dir"));
        int rc;

        if (dir == NULL || dir[0] == '\0')
            continue;
        rc = egpu__allocdir_remove(p->dra_root, dir);
        if (rc && first == 0)
            first = rc;
    }
    return first;
}

/* ------------------------------------------------------------------------ */
/* Prepare                                                                  */

/* The card of index idx among cards[0 .. n), or NULL. */
static const struct egpu_gpu_info *card_of(const struct egpu_gpu_info *cards, size_t n,
                                           uint32_t idx)
{
    for (size_t i = 0; i < n; i++)
        if (cards[i].index == idx && cards[i].uuid[0] != '\0')
            return &cards[i];
    return NULL;
}

/* What this node makes of decoded result r (of card card): core_pct 1..100
 * (absent: 100) and mem_mib 1..the card's (absent: the card's). Returns 0
 * or -EINVAL with err naming the field, its value and the allowed range. */
static int capacity_of(const struct egpu_api_dra_result *r, const struct egpu_gpu_info *card,
                       unsigned *core, unsigned *mem, struct egpu_error *err)
{
    *core = 100;
    *mem = (unsigned)(card->mem_mib > UINT32_MAX ? UINT32_MAX : card->mem_mib);
    if (r->has_cores) {
        if (r->core_pct < 1)
            return egpu_error_set(err, -EINVAL,
                                  "device %s: status.allocation.devices.results[%zu]."
                                  "consumedCapacity.cores is %" PRId64 ", not a share of one card "
                                  "(allowed: 1..100, percent)",
                                  r->device, r->at, r->core_pct);
        *core = (unsigned)r->core_pct;
    }
    if (r->has_mem) {
        if (r->mem_mib < 1 || (uint64_t)r->mem_mib > card->mem_mib)
            return egpu_error_set(err, -EINVAL,
                                  "device %s: status.allocation.devices.results[%zu]."
                                  "consumedCapacity.memory is %" PRId64 " MiB, not 1..%llu MiB, "
                                  "the card's memory (allowed: 1Mi..%lluMi)",
                                  r->device, r->at, r->mem_mib, (unsigned long long)card->mem_mib,
                                  (unsigned long long)card->mem_mib);
        *mem = (unsigned)r->mem_mib;
    }
    return 0;
}

/* Write device d's allocation dir as device-plugin mode does: vcuda.conf
 * and limits.json (container.c; the claim stands for the pod, the device
 * for the container), and for a share ld.so.preload. dir (len bytes) gets
 * its path. Returns 0 or a negative code with err. */
static int write_dir(struct egpu__dra_plugin *p, const char *ns, const char *claim,
                     const struct egpu__cdi_device *d, char *id, char *dir, size_t len,
                     struct egpu_error *err)
{
    struct egpu__container_config cfg = {.kube = p->kube,
                                         .node = p->node,
                                         .alloc_root = p->dra_root,
                                         .ctx_extra_mib = p->ctx_extra_mib};
    struct egpu__container_ref o;
    struct egpu_assigned *a = egpu_calloc(1, sizeof(*a));
    char text[PATH_MAX + 2];
    char *ids[1] = {id};
    int rc, dfd = -1;

    if (a == NULL)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    memset(&o, 0, sizeof(o));
    snprintf(o.ns, sizeof(o.ns), "%s", ns);
    snprintf(o.pod, sizeof(o.pod), "%s", claim);
    snprintf(o.container, sizeof(o.container), "%s", d->device);
    snprintf(a->node, sizeof(a->node), "%s", p->node);
    a->ncontainers = 1;
    a->ncards = 1;
    snprintf(a->uuids[0], sizeof(a->uuids[0]), "%s", d->uuid);
    snprintf(a->containers[0].name, sizeof(a->containers[0].name), "%s", d->device);
    a->containers[0].core_pct = d->core_pct;
    a->containers[0].mem_mib = d->mem_mib;
    a->containers[0].ncards = 1;
    rc = egpu__container_write(&cfg, &o, a, &a->containers[0], d->core_pct, ids, 1, NULL, dir, len,
                               err);
    egpu_free(a);
    if (rc || d->core_pct >= 100)
        return rc;
    rc = egpu__allocdir_open(p->dra_root, dir, false, true, NULL, &dfd, err);
    if (rc == 0) {
        snprintf(text, sizeof(text), "%s\n", p->interposer);
        rc = egpu__fs_write_at(dfd, dir, EGPU_ALLOCDIR_PRELOAD_FILE, text, strlen(text), 0644, err);
        close(dfd);
    }
    if (rc && egpu__allocdir_remove(p->dra_root, dir) != 0)
        egpu_log(EGPU_LOG_WARN, "DRA allocation dir not removed after a failed write dir=%s", dir);
    return rc;
}

int egpu__dra_plugin_results(const char *driver, const char *pool,
                             const struct egpu_gpu_info *cards, size_t ncards, const json_t *claim,
                             struct egpu__cdi_device *devs, size_t *n, json_t *recdevs,
                             struct egpu_error *err)
{
    const json_t *results = json_object_get(
        json_object_get(json_object_get(json_object_get(claim, "status"), "allocation"), "devices"),
        "results");
    struct egpu_api_dra_result *res = egpu_calloc(EGPU_CDI_DEVICES_MAX, sizeof(*res));
    char other[160] = "";
    size_t nres = 0, next = 0;
    int rc;

    *n = 0;
    if (res == NULL)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    rc = egpu_api_dra_results(claim, driver, res, EGPU_CDI_DEVICES_MAX, &nres, err);
    if (rc) { /* the claim's status is refused: the claim is */
        egpu_free(res);
        if (err != NULL)
            err->code = -EINVAL; /* the header's code, the decoder's message */
        return -EINVAL;
    }
    for (size_t i = 0; i < json_array_size(results) && other[0] == '\0'; i++) {
        /* The first result that is not ours on this node, named in the
         * error when nothing is left (the kubelet calls each driver with
         * the whole claim). */
        const json_t *r = json_array_get(results, i);
        const char *drv = egpu_api_str(json_object_get(r, "driver"));
        const char *pl = egpu_api_str(json_object_get(r, "pool"));

        while (next < nres && res[next].at < i)
            next++;
        if (next < nres && res[next].at == i && strcmp(res[next].pool, pool) == 0)
            continue;
        snprintf(other, sizeof(other), " (result %zu is driver %.40s pool %.60s)", i,
                 drv != NULL ? drv : "(none)", pl != NULL ? pl : "(none)");
    }
    for (size_t k = 0; rc == 0 && k < nres; k++) {
        const struct egpu_api_dra_result *r = &res[k];
        const struct egpu_gpu_info *card;
        struct egpu__cdi_device *d;

        /* One of this driver on another node: not this node's to prepare. */
        if (strcmp(r->pool, pool) != 0)
            continue;
        card = r->has_index ? card_of(cards, ncards, r->index) : NULL;
        if (card == NULL) {
            rc = egpu_error_set(err, -EINVAL,
                                "device %.63s (allocation result %zu) is not a GPU of node %s",
                                r->device, r->at, pool);
            break;
        }
        d = &devs[*n];
        memset(d, 0, sizeof(*d));
        /* Borrowed from the claim, as the header says (the same text as
         * r->device, which goes with res). */
        d->device = json_string_value(json_object_get(json_array_get(results, r->at), "device"));
        d->uuid = card->uuid;
        d->minor = card->minor;
        rc = capacity_of(r, card, &d->core_pct, &d->mem_mib, err);
        if (rc == 0 && recdevs != NULL &&
            json_array_append_new(recdevs,
                                  json_pack("{s:s,s:s,s:s,s:s,s:I,s:I}", "request", r->request,
                                            "pool", r->pool, "device", r->device, "shareID",
                                            r->share_id, "cores", (json_int_t)d->core_pct,
                                            "memoryMiB", (json_int_t)d->mem_mib)) != 0)
            rc = egpu_error_set(err, -ENOMEM, "out of memory");
        if (rc == 0)
            (*n)++;
    }
    egpu_free(res);
    if (rc == 0 && *n == 0)
        rc = egpu_error_set(err, -EINVAL, "no allocation result of driver %s in pool %s%s", driver,
                            pool, other);
    return rc;
}

/* Whether the claim uid's CDI spec file is there now. */
static bool spec_exists(const struct egpu__dra_plugin *p, const char *uid)
{
    char name[EGPU_CDI_VENDOR_LEN + EGPU_CDI_UID_LEN + 32], path[PATH_MAX];
    struct egpu_error e2 = {0};
    struct stat st;
    int n;

    if (egpu__cdi_spec_name(p->driver, uid, name, sizeof(name), &e2) != 0)
        return false;
    n = snprintf(path, sizeof(path), "%s/%s", p->cdi_dir, name);
    return n > 0 && (size_t)n < sizeof(path) && lstat(path, &st) == 0;
}

/* Make the claim's dirs, spec and record (the header's opening), with the
 * lock held. Returns 0 (*rec its record) or a negative code with err;
 * nothing is left on failure. */
static int prepare_new(struct egpu__dra_plugin *p, const char *ns, const char *uid,
                       const char *name, json_t **rec, struct egpu_error *err)
{
    struct egpu__cdi_device *devs = egpu_calloc(EGPU_CDI_DEVICES_MAX, sizeof(*devs));
    char(*ids)[EGPU_CDI_ID_MAX] = egpu_calloc(EGPU_CDI_DEVICES_MAX, sizeof(*ids));
    char(*dirs)[PATH_MAX] = egpu_calloc(EGPU_CDI_DEVICES_MAX, sizeof(*dirs));
    bool *existed = egpu_calloc(EGPU_CDI_DEVICES_MAX, sizeof(*existed));
    json_t *obj = NULL, *doc = NULL, *recdevs;
    const char *got;
    size_t n = 0, made = 0;
    bool spec = false, spec_existed = false;
    int rc;

    doc = json_pack("{s:s,s:s,s:s,s:[]}", "uid", uid, "namespace", ns, "name", name, "devices");
    if (devs == NULL || ids == NULL || dirs == NULL || existed == NULL || doc == NULL) {
        rc = egpu_error_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    recdevs = json_object_get(doc, "devices");
    rc = egpu_kube_get(p->kube, &egpu_kube_resourceclaims, ns, name, &obj, NULL, err);
    if (rc)
        goto out;
    got = json_string_value(json_object_get(json_object_get(obj, "metadata"), "uid"));
    if (got == NULL || strcmp(got, uid) != 0) {
        rc = egpu_error_set(err, -EINVAL,
                            "ResourceClaim %s/%s has uid %s, the kubelet asked for uid %s", ns,
                            name, got != NULL ? got : "(none)", uid);
        goto out;
    }
    rc = egpu__dra_plugin_results(p->driver, p->node, p->cards, p->ncards, obj, devs, &n, recdevs,
                                  err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *idp[1] = {ids[i]};
        struct stat st;

        rc = egpu__cdi_device_id(p->driver, uid, devs[i].device, ids[i], sizeof(ids[i]), err);
        /* A dir already there is a share of this claim and device that an
         * earlier prepare made (its record lost): it is written over, and
         * kept on failure, as a container may be using its shared/. */
        if (rc == 0 && egpu__allocdir_path(p->dra_root, idp, 1, dirs[i], sizeof(dirs[i])) == 0)
            existed[i] = lstat(dirs[i], &st) == 0;
        if (rc == 0)
            rc = write_dir(p, ns, name, &devs[i], ids[i], dirs[i], sizeof(dirs[i]), err);
        if (rc == 0) {
            devs[i].alloc_dir = dirs[i];
            made++;
        }
    }
    if (rc == 0) {
        struct egpu__cdi_claim c = {.driver = p->driver,
                                    .claim_uid = uid,
                                    .interposer = p->interposer,
                                    .ctx_extra_mib = p->ctx_extra_mib,
                                    .devices = devs,
                                    .ndevices = n};

        spec_existed = spec_exists(p, uid);
        rc = egpu__cdi_spec_write(p->cdi_dir, &c, ids, err);
        spec = rc == 0;
    }
    /* The claim again, just before the record commits the prepare: one
     * deleted (or deleted and made again) meanwhile is not prepared. */
    if (rc == 0) {
        json_decref(obj);
        obj = NULL;
        rc = egpu_kube_get(p->kube, &egpu_kube_resourceclaims, ns, name, &obj, NULL, err);
        if (rc == -ENOENT)
            rc = egpu_error_set(err, -ENOENT,
                                "ResourceClaim %s/%s (uid %s) was deleted while being prepared", ns,
                                name, uid);
        got = json_string_value(json_object_get(json_object_get(obj, "metadata"), "uid"));
        if (rc == 0 && (got == NULL || strcmp(got, uid) != 0))
            rc = egpu_error_set(err, -ENOENT,
                                "ResourceClaim %s/%s (uid %s) was replaced by uid %s while "
                                "being prepared",
                                ns, name, uid, got != NULL ? got : "(none)");
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *d = json_array_get(recdevs, i);

        if (json_object_set_new(d, "cdi", json_string(ids[i])) != 0 ||
            json_object_set_new(d, "dir", json_string(dirs[i])) != 0)
            rc = egpu_error_set(err, -ENOMEM, "out of memory");
    }
    if (rc == 0)
        rc = record_write(p, uid, doc, err);
out:
    if (rc) {
        for (size_t i = 0; i < made; i++)
            if (!existed[i] && egpu__allocdir_remove(p->dra_root, dirs[i]) != 0)
                egpu_log(EGPU_LOG_WARN, "DRA allocation dir not removed dir=%s", dirs[i]);
        if (spec && !spec_existed) {
            struct egpu_error e2 = {0};

            if (egpu__cdi_spec_remove(p->cdi_dir, p->driver, uid, &e2) != 0)
                egpu_log(EGPU_LOG_WARN, "CDI spec not removed claim=%s error=\"%s\"", uid, e2.msg);
        }
        json_decref(doc);
        doc = NULL;
    }
    *rec = doc;
    json_decref(obj);
    egpu_free(devs);
    egpu_free(ids);
    egpu_free(dirs);
    egpu_free(existed);
    return rc;
}

int egpu__dra_plugin_prepare(struct egpu__dra_plugin *p, const char *ns, const char *uid,
                             const char *name, json_t **rec, struct egpu_error *err)
{
    int rc = egpu__cdi_check_uid(uid, err);

    if (rc)
        return rc;
    if (ns == NULL || ns[0] == '\0' || name == NULL || name[0] == '\0')
        return egpu_error_set(err, -EINVAL, "claim %s: no namespace or name", uid);
    pthread_mutex_lock(&p->lock);
    rc = record_read(p, uid, rec, err);
    if (rc == 0) {
        const char *rns = json_string_value(json_object_get(*rec, "namespace"));
        const char *rname = json_string_value(json_object_get(*rec, "name"));

        /* The record answers for uid only as the claim it was made for. */
        if (strcmp(rns, ns) != 0 || strcmp(rname, name) != 0) {
            rc = egpu_error_set(err, -EINVAL,
                                "claim uid %s was prepared as ResourceClaim %s/%s, not %s/%s", uid,
                                rns, rname, ns, name);
            json_decref(*rec);
            *rec = NULL;
        }
    } else if (is_bad_record(rc)) {
        /* Not the agent's record (a link, garbage, another owner): never
         * believed nor followed; removed, and made again from the API
         * server, keeping the dirs a container may use. */
        egpu_log(EGPU_LOG_WARN, "DRA claim record rebuilt claim=%s/%s uid=%s error=\"%s\"", ns,
                 name, uid, err != NULL ? err->msg : "");
        rc = record_remove(p, uid, err);
        if (rc == 0)
            rc = -ENOENT;
    }
    if (rc == -ENOENT) {
        if (err != NULL)
            memset(err, 0, sizeof(*err));
        rc = prepare_new(p, ns, uid, name, rec, err);
        if (rc == 0)
            egpu_log(EGPU_LOG_NOTICE, "DRA claim prepared claim=%s/%s uid=%s devices=%zu", ns, name,
                     uid, json_array_size(json_object_get(*rec, "devices")));
    }
    usage_update(p);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Unprepare                                                                */

/* Remove the dir the claim uid has for device "gpu-<idx>" if there is one
 * (for a record that cannot be believed, every index is tried). Returns 0
 * or what egpu__allocdir_remove returns. */
static int remove_claim_dir(struct egpu__dra_plugin *p, const char *uid, unsigned idx)
{
    char device[32], id[EGPU_CDI_ID_MAX], dir[PATH_MAX];
    char *ids[1] = {id};
    struct egpu_error e2 = {0};
    struct stat st;

    if (egpu_api_dra_device_name(idx, device, sizeof(device)) != 0 ||
        egpu__cdi_device_id(p->driver, uid, device, id, sizeof(id), &e2) != 0 ||
        egpu__allocdir_path(p->dra_root, ids, 1, dir, sizeof(dir)) != 0 || lstat(dir, &st) != 0)
        return 0;
    return egpu__allocdir_remove(p->dra_root, dir);
}

/* remove_claim_dir for every index a card of this node can have. */
static int remove_claim_dirs(struct egpu__dra_plugin *p, const char *uid)
{
    int first = 0, rc;

    for (unsigned i = 0; i < EGPU_NODE_GPUS_MAX; i++) {
        rc = remove_claim_dir(p, uid, i);
        if (rc && first == 0)
            first = rc;
    }
    for (size_t i = 0; i < p->ncards; i++) {
        if (p->cards[i].index < EGPU_NODE_GPUS_MAX)
            continue;
        rc = remove_claim_dir(p, uid, p->cards[i].index);
        if (rc && first == 0)
            first = rc;
    }
    return first;
}

int egpu__dra_plugin_unprepare(struct egpu__dra_plugin *p, const char *uid, struct egpu_error *err)
{
    json_t *rec = NULL;
    bool bad = false;
    int rc = egpu__cdi_check_uid(uid, err);

    if (rc)
        return rc;
    pthread_mutex_lock(&p->lock);
    rc = record_read(p, uid, &rec, err);
    if (rc == -ENOENT) {
        rc = 0; /* never prepared, or already undone: still no spec may stay */
    } else if (is_bad_record(rc)) {
        egpu_log(EGPU_LOG_WARN, "DRA claim record not believed uid=%s error=\"%s\"", uid,
                 err != NULL ? err->msg : "");
        bad = true;
        rc = 0;
        if (err != NULL)
            memset(err, 0, sizeof(*err));
    }
    if (rc == 0) {
        /* A record's dirs are the ones its claim and devices give
         * (egpu__dra_plugin_record_parse checked); without one (never
         * prepared, or a prepare that lost its record and failed to rebuild
         * it), every dir the claim can have. */
        rc = rec == NULL ? remove_claim_dirs(p, uid)
                         : remove_dirs(p, json_object_get(rec, "devices"));
        if (rc)
            egpu_error_set(err, rc, "DRA claim %s: allocation dir not removed: %s", uid,
                           egpu_strerror(rc));
    }
    if (rc == 0)
        rc = egpu__cdi_spec_remove(p->cdi_dir, p->driver, uid, err);
    if (rc == 0 && (rec != NULL || bad))
        rc = record_remove(p, uid, err);
    usage_update(p);
    pthread_mutex_unlock(&p->lock);
    if (rc == 0 && (rec != NULL || bad))
        egpu_log(EGPU_LOG_NOTICE, "DRA claim unprepared uid=%s", uid);
    json_decref(rec);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* What /metrics reads                                                      */

enum egpu__dra_reason egpu__dra_reason_of(int rc)
{
    switch (rc) {
    case -EINVAL:
        return EGPU_DRA_REASON_INVALID;
    case -ENOENT:
        return EGPU_DRA_REASON_NOT_FOUND;
    case -ENOMEM:
        return EGPU_DRA_REASON_NO_MEMORY;
    case -EACCES:
    case -EPERM:
    case -EAGAIN:
    case -ETIMEDOUT:
    case -ECONNREFUSED:
    case -EPROTO:
    case -EMSGSIZE:
    case -ECANCELED:
    case -EOPNOTSUPP:
#if ENOTSUP != EOPNOTSUPP
    case -ENOTSUP:
#endif
    case EGPU_KUBE_ECONFLICT:
    case EGPU_KUBE_EEXPIRED:
        return EGPU_DRA_REASON_API;
    default:
        return EGPU_DRA_REASON_FILE;
    }
}

const char *egpu__dra_reason_name(enum egpu__dra_reason r)
{
    static const char *const names[EGPU_DRA_REASON_COUNT] = {
        [EGPU_DRA_REASON_INVALID] = "invalid",
        [EGPU_DRA_REASON_NOT_FOUND] = "not_found",
        [EGPU_DRA_REASON_API] = "api",
        [EGPU_DRA_REASON_FILE] = "file",
        [EGPU_DRA_REASON_NO_MEMORY] = "no_memory",
    };

    return (unsigned)r < EGPU_DRA_REASON_COUNT ? names[r] : "?";
}

void egpu__dra_plugin_stats(struct egpu__dra_plugin *p, struct egpu__dra_plugin_stats *out)
{
    pthread_mutex_lock(&p->stats_lock);
    *out = p->stats;
    pthread_mutex_unlock(&p->stats_lock);
}

void egpu__dra_plugin_usage(struct egpu__dra_plugin *p, struct egpu__dra_usage *out)
{
    pthread_mutex_lock(&p->stats_lock);
    *out = p->usage;
    pthread_mutex_unlock(&p->stats_lock);
}

/* Add record rec's devices to u (its cards set). */
static void usage_add(struct egpu__dra_usage *u, const json_t *rec)
{
    const json_t *d;
    size_t i;

    json_array_foreach(json_object_get(rec, "devices"), i, d)
    {
        const json_t *cores = json_object_get(d, "cores"), *mem = json_object_get(d, "memoryMiB");
        const char *device = json_string_value(json_object_get(d, "device"));
        struct egpu__dra_card_usage *c = NULL;

        for (size_t k = 0; k < u->ncards && c == NULL; k++)
            if (device != NULL && strcmp(u->cards[k].device, device) == 0)
                c = &u->cards[k];
        if (c == NULL) {
            u->orphans++;
            continue;
        }
        c->shares++;
        if (cores == NULL || mem == NULL) {
            u->unsized++;
            continue;
        }
        c->core_pct += (unsigned)json_integer_value(cores);
        c->alloc_mem_mib += (uint64_t)json_integer_value(mem);
    }
}

/* Make the usage sums again from the records below <alloc_root>/dra, with
 * the lock held (the header's egpu__dra_plugin_usage). Out of memory or an
 * unreadable root keeps the last sums. */
static void usage_update(struct egpu__dra_plugin *p)
{
    const size_t prefix = strlen(EGPU_DRA_PLUGIN_RECORD_PREFIX), suffix = strlen(".json");
    struct egpu__dra_usage *u = egpu_calloc(1, sizeof(*u));
    struct dirent *e;
    DIR *dir = NULL;
    int fd = -1, rc;

    if (u == NULL)
        return;
    u->ncards = p->ncards;
    for (size_t i = 0; i < p->ncards; i++) {
        struct egpu__dra_card_usage *c = &u->cards[i];

        snprintf(c->uuid, sizeof(c->uuid), "%s", p->cards[i].uuid);
        if (egpu_api_dra_device_name(p->cards[i].index, c->device, sizeof(c->device)) != 0)
            c->device[0] = '\0';
        c->mem_mib = p->cards[i].mem_mib;
    }
    rc = egpu__fs_open_dir(AT_FDCWD, p->dra_root, &fd);
    if (rc == 0) {
        dir = fdopendir(fd);
        if (dir == NULL) {
            close(fd);
            rc = -errno;
        }
    }
    if (rc && rc != -ENOENT) {
        egpu_log(EGPU_LOG_WARN, "DRA claim records not read root=%s error=\"%s\"", p->dra_root,
                 egpu_strerror(rc));
        egpu_free(u);
        return;
    }
    while (dir != NULL && (e = readdir(dir)) != NULL) {
        char uid[EGPU_CDI_UID_LEN + 1];
        struct egpu_error e2 = {0};
        size_t len = strlen(e->d_name);
        json_t *rec = NULL;

        if (len <= prefix + suffix || len - prefix - suffix >= sizeof(uid) ||
            strncmp(e->d_name, EGPU_DRA_PLUGIN_RECORD_PREFIX, prefix) != 0 ||
            strcmp(e->d_name + len - suffix, ".json") != 0)
            continue;
        memcpy(uid, e->d_name + prefix, len - prefix - suffix);
        uid[len - prefix - suffix] = '\0';
        if (egpu__cdi_check_uid(uid, NULL) != 0 || record_read(p, uid, &rec, &e2) != 0) {
            u->bad++;
            continue;
        }
        u->claims++;
        usage_add(u, rec);
        json_decref(rec);
    }
    if (dir != NULL)
        closedir(dir);
    pthread_mutex_lock(&p->stats_lock);
    p->usage = *u;
    pthread_mutex_unlock(&p->stats_lock);
    egpu_free(u);
}

/* ------------------------------------------------------------------------ */
/* Handlers                                                                 */

/* Count a request (prepare or unprepare; bad: it did not decode) naming
 * nclaims claims. */
static void count_call(struct egpu__dra_plugin *p, bool prepare, bool bad, size_t nclaims)
{
    pthread_mutex_lock(&p->stats_lock);
    if (prepare) {
        p->stats.prepare_calls++;
        p->stats.prepare_bad += bad;
        p->stats.prepare_claims += nclaims;
    } else {
        p->stats.unprepare_calls++;
        p->stats.unprepare_bad += bad;
        p->stats.unprepare_claims += nclaims;
    }
    pthread_mutex_unlock(&p->stats_lock);
}

/* Count a claim answered with the error rc. */
static void count_error(struct egpu__dra_plugin *p, bool prepare, int rc)
{
    enum egpu__dra_reason r = egpu__dra_reason_of(rc);

    pthread_mutex_lock(&p->stats_lock);
    if (prepare)
        p->stats.prepare_errors[r]++;
    else
        p->stats.unprepare_errors[r]++;
    pthread_mutex_unlock(&p->stats_lock);
}

/* The answer's storage for one prepared claim; strings borrowed from rec. */
struct prep_out {
    json_t *rec;
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry entry;
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse resp;
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device dev[EGPU_CDI_DEVICES_MAX];
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device *devp[EGPU_CDI_DEVICES_MAX];
    char *req[EGPU_CDI_DEVICES_MAX];
    char *cdi[EGPU_CDI_DEVICES_MAX];
    struct egpu_error err;
};

/* Fill o's answer from o->rec (or o->err); v1 sets share_id. */
static void prep_answer(struct prep_out *o, char *uid, bool v1)
{
    static const K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry
        entry0 =
            K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__CLAIMS_ENTRY__INIT;
    static const K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse resp0 =
        K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCE_RESPONSE__INIT;
    static const K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device dev0 =
        K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE__INIT;
    json_t *devs = json_object_get(o->rec, "devices"), *d;
    size_t i, n = 0;

    o->entry = entry0;
    o->resp = resp0;
    o->entry.key = uid;
    o->entry.value = &o->resp;
    if (o->rec == NULL) {
        o->resp.error = o->err.msg;
        return;
    }
    json_array_foreach(devs, i, d)
    {
        const char *share = json_string_value(json_object_get(d, "shareID"));

        if (n == EGPU_CDI_DEVICES_MAX)
            break;
        o->dev[n] = dev0;
        o->req[n] = (char *)json_string_value(json_object_get(d, "request"));
        o->cdi[n] = (char *)json_string_value(json_object_get(d, "cdi"));
        if (o->req[n] != NULL && o->req[n][0] != '\0') {
            o->dev[n].n_request_names = 1;
            o->dev[n].request_names = &o->req[n];
        }
        o->dev[n].pool_name = (char *)json_string_value(json_object_get(d, "pool"));
        o->dev[n].device_name = (char *)json_string_value(json_object_get(d, "device"));
        if (o->cdi[n] != NULL) {
            o->dev[n].n_cdi_device_ids = 1;
            o->dev[n].cdi_device_ids = &o->cdi[n];
        }
        if (v1 && share != NULL && share[0] != '\0') {
            o->dev[n]._share_id_case =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE___SHARE_ID_SHARE_ID;
            o->dev[n].share_id = (char *)share;
        }
        if (o->dev[n].pool_name == NULL)
            o->dev[n].pool_name = (char *)"";
        if (o->dev[n].device_name == NULL)
            o->dev[n].device_name = (char *)"";
        o->devp[n] = &o->dev[n];
        n++;
    }
    o->resp.n_devices = n;
    o->resp.devices = o->devp;
}

static int on_prepare(struct egpu__dra_plugin *p, const struct egpu_grpc_request *req,
                      struct egpu_buf *reply, struct egpu_grpc_status *st, bool v1)
{
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse resp =
        K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest *r =
        (K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest *)egpu__pb_unpack(
            &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor, req);
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry **ep = NULL;
    struct prep_out *o = NULL;
    int rc = 0;

    count_call(p, true, r == NULL, r != NULL ? r->n_claims : 0);
    if (r == NULL)
        return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                    "NodePrepareResources: request is not a "
                                    "NodePrepareResourcesRequest");
    if (r->n_claims > 0) {
        o = egpu_calloc(r->n_claims, sizeof(*o));
        ep = egpu_calloc(r->n_claims, sizeof(*ep));
        if (o == NULL || ep == NULL) {
            rc = -ENOMEM;
            goto out;
        }
    }
    for (size_t i = 0; i < r->n_claims; i++) {
        const K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim *c = r->claims[i];

        rc = egpu__dra_plugin_prepare(p, c->namespace_, c->uid, c->name, &o[i].rec, &o[i].err);
        if (rc != 0) {
            count_error(p, true, rc);
            rc = 0;
            o[i].rec = NULL;
            egpu_log(EGPU_LOG_WARN, "DRA claim not prepared claim=%s/%s uid=%s error=\"%s\"",
                     c->namespace_, c->name, c->uid, o[i].err.msg);
        }
        prep_answer(&o[i], c->uid, v1);
        ep[i] = &o[i].entry;
    }
    resp.n_claims = r->n_claims;
    resp.claims = ep;
    rc = egpu__pb_pack(&resp.base, reply);
out:
    for (size_t i = 0; o != NULL && i < r->n_claims; i++)
        json_decref(o[i].rec);
    egpu_free(o);
    egpu_free(ep);
    egpu__pb_unpacked_free(&r->base);
    return rc;
}

static int on_unprepare(struct egpu__dra_plugin *p, const struct egpu_grpc_request *req,
                        struct egpu_buf *reply, struct egpu_grpc_status *st)
{
    static const K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry
        entry0 =
            K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__CLAIMS_ENTRY__INIT;
    static const K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse resp0 =
        K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCE_RESPONSE__INIT;
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse resp =
        K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT;
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest *r =
        (K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest *)egpu__pb_unpack(
            &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor,
            req);
    struct unprep_out {
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry entry;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse resp;
        struct egpu_error err;
    } *o = NULL;
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry **ep = NULL;
    int rc = 0;

    count_call(p, false, r == NULL, r != NULL ? r->n_claims : 0);
    if (r == NULL)
        return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                    "NodeUnprepareResources: request is not a "
                                    "NodeUnprepareResourcesRequest");
    if (r->n_claims > 0) {
        o = egpu_calloc(r->n_claims, sizeof(*o));
        ep = egpu_calloc(r->n_claims, sizeof(*ep));
        if (o == NULL || ep == NULL) {
            rc = -ENOMEM;
            goto out;
        }
    }
    for (size_t i = 0; i < r->n_claims; i++) {
        const K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim *c = r->claims[i];

        o[i].entry = entry0;
        o[i].resp = resp0;
        o[i].entry.key = c->uid;
        o[i].entry.value = &o[i].resp;
        rc = egpu__dra_plugin_unprepare(p, c->uid, &o[i].err);
        if (rc != 0) {
            count_error(p, false, rc);
            rc = 0;
            o[i].resp.error = o[i].err.msg;
            egpu_log(EGPU_LOG_WARN, "DRA claim not unprepared claim=%s/%s uid=%s error=\"%s\"",
                     c->namespace_, c->name, c->uid, o[i].err.msg);
        }
        ep[i] = &o[i].entry;
    }
    resp.n_claims = r->n_claims;
    resp.claims = ep;
    rc = egpu__pb_pack(&resp.base, reply);
out:
    egpu_free(o);
    egpu_free(ep);
    egpu__pb_unpacked_free(&r->base);
    return rc;
}

int egpu__dra_plugin_on_prepare_v1(void *data, const struct egpu_grpc_request *req,
                                   struct egpu_buf *reply, struct egpu_grpc_status *st)
{
    return on_prepare(data, req, reply, st, true);
}

int egpu__dra_plugin_on_prepare_v1beta1(void *data, const struct egpu_grpc_request *req,
                                        struct egpu_buf *reply, struct egpu_grpc_status *st)
{
    return on_prepare(data, req, reply, st, false);
}

int egpu__dra_plugin_on_unprepare_v1(void *data, const struct egpu_grpc_request *req,
                                     struct egpu_buf *reply, struct egpu_grpc_status *st)
{
    return on_unprepare(data, req, reply, st);
}

int egpu__dra_plugin_on_unprepare_v1beta1(void *data, const struct egpu_grpc_request *req,
                                          struct egpu_buf *reply, struct egpu_grpc_status *st)
{
    return on_unprepare(data, req, reply, st);
}

/* ------------------------------------------------------------------------ */
/* Life cycle                                                               */

static bool absolute(const char *s)
{
    return s != NULL && s[0] == '/';
}

int egpu__dra_plugin_new(const struct egpu__dra_plugin_config *cfg, struct egpu__dra_plugin **out,
                         struct egpu_error *err)
{
    const char *cdi = cfg->cdi_dir != NULL ? cfg->cdi_dir : EGPU_CDI_DIR;
    struct egpu__dra_plugin *p;
    char root[PATH_MAX];
    int rc, n;

    if (cfg->kube == NULL || cfg->node == NULL || cfg->node[0] == '\0')
        return egpu_error_set(err, -EINVAL, "DRA plugin: no API client or node name");
    if (!absolute(cfg->endpoint) || !absolute(cfg->alloc_root) || !absolute(cdi) ||
        !absolute(cfg->interposer))
        return egpu_error_set(err, -EINVAL,
                              "DRA plugin: endpoint, allocation root, CDI dir and interposer "
                              "must be absolute paths");
    n = snprintf(root, sizeof(root), "%s/%s", cfg->alloc_root, EGPU_DRA_PLUGIN_SUBDIR);
    if (n < 0 || (size_t)n >= sizeof(root))
        return egpu_error_set(err, -ENAMETOOLONG, "DRA plugin: allocation root too long");
    p = egpu_calloc(1, sizeof(*p));
    if (p == NULL)
        return egpu_error_set(err, -ENOMEM, "DRA plugin: out of memory");
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->stats_lock, NULL);
    p->kube = cfg->kube;
    p->ctx_extra_mib = cfg->ctx_extra_mib;
    p->node = egpu_strdup(cfg->node);
    p->driver = egpu_strdup(cfg->driver != NULL ? cfg->driver : EGPU_API_DRA_DRIVER);
    p->endpoint = egpu_strdup(cfg->endpoint);
    p->dra_root = egpu_strdup(root);
    p->cdi_dir = egpu_strdup(cdi);
    p->interposer = egpu_strdup(cfg->interposer);
    if (p->node == NULL || p->driver == NULL || p->endpoint == NULL || p->dra_root == NULL ||
        p->cdi_dir == NULL || p->interposer == NULL) {
        egpu__dra_plugin_free(p);
        return egpu_error_set(err, -ENOMEM, "DRA plugin: out of memory");
    }
    rc = egpu_grpc_server_new(p->endpoint, 4, &p->srv, err);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, EGPU_DRA_METHOD_PREPARE_V1,
                                    egpu__dra_plugin_on_prepare_v1, p);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, EGPU_DRA_METHOD_UNPREPARE_V1,
                                    egpu__dra_plugin_on_unprepare_v1, p);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, EGPU_DRA_METHOD_PREPARE_V1BETA1,
                                    egpu__dra_plugin_on_prepare_v1beta1, p);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, EGPU_DRA_METHOD_UNPREPARE_V1BETA1,
                                    egpu__dra_plugin_on_unprepare_v1beta1, p);
    if (rc) {
        if (err != NULL && err->code == 0)
            egpu_error_set(err, rc, "DRA plugin: %s", egpu_strerror(rc));
        egpu__dra_plugin_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void egpu__dra_plugin_free(struct egpu__dra_plugin *p)
{
    if (p == NULL)
        return;
    egpu_grpc_server_free(p->srv);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->stats_lock);
    egpu_free(p->node);
    egpu_free(p->driver);
    egpu_free(p->endpoint);
    egpu_free(p->dra_root);
    egpu_free(p->cdi_dir);
    egpu_free(p->interposer);
    egpu_free(p);
}

void egpu__dra_plugin_set_cards(struct egpu__dra_plugin *p, const struct egpu_gpu_info *cards,
                                size_t n)
{
    if (n > EGPU_NODE_GPUS_MAX)
        n = EGPU_NODE_GPUS_MAX;
    pthread_mutex_lock(&p->lock);
    if (n > 0)
        memcpy(p->cards, cards, n * sizeof(*cards));
    p->ncards = n;
    usage_update(p); /* the records' devices map to these cards now */
    pthread_mutex_unlock(&p->lock);
}

int egpu__dra_plugin_serve(struct egpu__dra_plugin *p, struct egpu_error *err)
{
    int rc;

    egpu__dra_plugin_stop(p);
    rc = egpu_grpc_server_start(p->srv, err);
    if (rc)
        return rc;
    p->running = true;
    egpu_log(EGPU_LOG_NOTICE, "DRA plugin serving socket=%s driver=%s node=%s", p->endpoint,
             p->driver, p->node);
    return 0;
}

void egpu__dra_plugin_stop(struct egpu__dra_plugin *p)
{
    if (!p->running)
        return;
    egpu_grpc_server_stop(p->srv);
    p->running = false;
}

const char *egpu__dra_plugin_socket(const struct egpu__dra_plugin *p)
{
    return p->endpoint;
}
