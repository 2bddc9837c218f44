/* agent/plugin.c - the kubelet device plugin for elasticgpu.io/gpu-core.
 *
 * Serves v1beta1.DevicePlugin on <dir>/elasticgpu.sock (gRPC, src/net/grpc_server.c)
 * and registers with the kubelet (DESIGN.md section 2.3):
 *   - GetDevicePluginOptions: both optional calls wanted;
 *   - ListAndWatch: 100 IDs "<uuid>-<nn>" per card, the full list at once and
 *     again whenever egpu__plugin_refresh sees a health change;
 *   - GetPreferredAllocation: with an API server, the IDs of the card(s) the
 *     scheduler assigned (prestart.c); otherwise, or when no pending pod
 *     matches, keeps a container on as few cards as possible (whole free
 *     cards for multiples of 100, else the fullest card that still fits:
 *     binpack), starting from the must-include IDs;
 *   - Allocate: derives the card(s) from the IDs; answers the cards as
 *     --device-list-strategy says (NVIDIA_VISIBLE_DEVICES, CDI devices
 *     nvidia.com/gpu=<uuid>, or DeviceSpecs of /dev/nvidia<minor> and the
 *     control nodes), EGPU_ALLOC_DIR and a mount of the allocation
 *     dir <alloc_root>/<hash of the sorted IDs> at /etc/elastic-gpu; a
 *     container sharing a card (fewer than 100 IDs on it) also gets the
 *     interposer and /etc/ld.so.preload naming it, so unsetting LD_PRELOAD
 *     cannot escape the limits;
 *   - after an Allocate, with an API server, marker.c's thread learns the
 *     owner of the IDs from PodResources and marks it elasticgpu.io/allocated
 *     (the kubelet records the IDs at admission; PreStartContainer comes
 *     only after the image pull);
 *   - PreStartContainer: checks the IDs; with an API server prestart.c then
 *     finds the owner, checks the cards and writes limits.json (and marks
 *     the container allocated when the marker did not);
 *   - egpu__plugin_cleanup: removes the allocation dirs whose IDs no
 *     container holds any more (PodResources List), never one in use.
 *
 * Files are written to a temporary file and renamed into place; a dir this
 * call created is removed again when writing into it fails, so a failed
 * Allocate or PreStartContainer leaves nothing half done.
 *
 * A container can write below <dir>/shared and nowhere else in its
 * allocation dir (the layout is in plugin_int.h): the agent writes through
 * directory fds with allocfs.c (O_NOFOLLOW, O_EXCL under a random name,
 * renameat), reads nothing a container can write, and keeps its own record
 * of what PreStartContainer wrote for the metrics.
 *
 * DESIGN: the allocation dir is named by a hash of the sorted IDs, so
 * Allocate and PreStartContainer, which both see only IDs, find the same
 * dir. Messages are protobuf-c (proto/), unpacked and packed with an
 * allocator on egpu_malloc. Errors the kubelet shows in pod events name the
 * offending ID.
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
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "allocfs_int.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "egpu/grpc.h"
#include "egpu/log.h"
#include "egpu/api.h"
#include "marker_int.h"
#include "plugin_int.h"
#include "prestart_int.h"

#define STREAMS_MAX 16 /* ListAndWatch streams open at once (the kubelet keeps one) */
#define DEVICES_MAX (EGPU_NODE_GPUS_MAX * EGPU_PLUGIN_IDS_PER_CARD)

struct egpu_plugin {
    char *dir;
    char *alloc_root;
    char *interposer;
    char *pod_resources;
    char *node;
    char socket[PATH_MAX];
    char kubelet[PATH_MAX];
    struct egpu_gpus *gpus;
    struct egpu_kube *kube;
    struct egpu_grpc_server *srv;
    enum egpu_plugin_strategy strategy;
    unsigned ctx_extra_mib; /* for vcuda.conf (PreStartContainer) */
    bool running;
    pthread_mutex_t alloc_lock;     /* Allocate's mkdir vs. the cleanup's removal */
    pthread_mutex_t allocated_lock; /* each read-and-patch of elasticgpu.io/allocated */
    struct egpu__marker *marker;    /* marks allocated after Allocate; NULL without kube */
    bool cleanup_failed;            /* the last cleanup's PodResources List failed */

    pthread_mutex_t rec_lock;       /* guards the record */
    struct egpu_plugin_limits *rec; /* what PreStartContainer wrote, per dir */
    size_t nrec, caprec;

    pthread_mutex_t lock; /* guards what follows */
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    size_t ncards;
    struct egpu_grpc_stream *streams[STREAMS_MAX];
    size_t nstreams;
    struct egpu_plugin_stats stats;
};

/* ------------------------------------------------------------------------ */
/* protobuf-c glue                                                          */

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    return egpu_malloc(size);
}

static void pb_free(void *data, void *p)
{
    (void)data;
    egpu_free(p);
}

ProtobufCAllocator egpu__pb_allocator = {pb_alloc, pb_free, NULL};

struct pb_sink {
    ProtobufCBuffer base;
    struct egpu_buf *b;
    int rc;
};

static void pb_append(ProtobufCBuffer *base, size_t len, const uint8_t *data)
{
    struct pb_sink *s = (struct pb_sink *)base;

    if (s->rc == 0)
        s->rc = egpu_buf_append(s->b, data, len);
}

/* Pack m at the end of b. Returns 0, -EMSGSIZE or -ENOMEM. */
static int pb_pack(const ProtobufCMessage *m, struct egpu_buf *b)
{
    struct pb_sink s = {.base = {.append = pb_append}, .b = b, .rc = 0};

    protobuf_c_message_pack_to_buffer(m, &s.base);
    return s.rc;
}

static ProtobufCMessage *pb_unpack(const ProtobufCMessageDescriptor *d,
                                   const struct egpu_grpc_request *req)
{
    return protobuf_c_message_unpack(d, &egpu__pb_allocator, req->len, (const uint8_t *)req->data);
}

static void pb_unpacked_free(ProtobufCMessage *m)
{
    if (m != NULL)
        protobuf_c_message_free_unpacked(m, &egpu__pb_allocator);
}

/* ------------------------------------------------------------------------ */
/* Device IDs                                                               */

int egpu__plugin_device_id(const char *uuid, unsigned slot, char *out, size_t len)
{
    int n;

    if (slot >= EGPU_PLUGIN_IDS_PER_CARD)
        return -EINVAL;
    n = snprintf(out, len, "%s-%02u", uuid, slot);
    if (n < 0 || (size_t)n >= len || n >= EGPU_PLUGIN_ID_MAX)
        return -ENAMETOOLONG;
    return 0;
}

/* The card (index into cards) and slot of id. Returns 0, EGPU_ESYNTAX (not
 * "<uuid>-<nn>") or -ENOENT (no such card); st says which ID and why. */
static int parse_id(const struct egpu_gpu_info *cards, size_t ncards, const char *id, size_t *card,
                    unsigned *slot, struct egpu_grpc_status *st)
{
    size_t len = strlen(id), ulen;

    if (len < 4 || len >= EGPU_PLUGIN_ID_MAX || id[len - 3] != '-' || id[len - 2] < '0' ||
        id[len - 2] > '9' || id[len - 1] < '0' || id[len - 1] > '9') {
        egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                             "device ID \"%.64s\" is malformed: expected <GPU UUID>-<00..99>", id);
        return EGPU_ESYNTAX;
    }
    ulen = len - 3;
    for (size_t i = 0; i < ncards; i++) {
        if (cards[i].uuid[0] != '\0' && strlen(cards[i].uuid) == ulen &&
            memcmp(cards[i].uuid, id, ulen) == 0) {
            *card = i;
            *slot = (unsigned)((id[len - 2] - '0') * 10 + (id[len - 1] - '0'));
            return 0;
        }
    }
    egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                         "device ID \"%.64s\" names no GPU of this node (unknown UUID %.*s)", id,
                         (int)ulen, id);
    return -ENOENT;
}

/* Copy the card list under the lock. */
static size_t snapshot(struct egpu_plugin *p, struct egpu_gpu_info *cards)
{
    size_t n;

    pthread_mutex_lock(&p->lock);
    n = p->ncards;
    memcpy(cards, p->cards, n * sizeof(cards[0]));
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* Per-card counts of ids (n of them) into count[], rejecting malformed,
 * unknown and repeated IDs. Returns 0 or a negative code with st set. */
static int count_ids(const struct egpu_gpu_info *cards, size_t ncards, char *const *ids, size_t n,
                     unsigned *count, struct egpu_grpc_status *st)
{
    uint64_t seen[EGPU_NODE_GPUS_MAX][(EGPU_PLUGIN_IDS_PER_CARD + 63) / 64];

    memset(seen, 0, sizeof(seen));
    memset(count, 0, EGPU_NODE_GPUS_MAX * sizeof(count[0]));
    for (size_t i = 0; i < n; i++) {
        size_t card;
        unsigned slot;
        int rc = parse_id(cards, ncards, ids[i], &card, &slot, st);

        if (rc)
            return rc;
        if (seen[card][slot / 64] & (UINT64_C(1) << (slot % 64)))
            return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                        "device ID \"%s\" is given twice", ids[i]);
        seen[card][slot / 64] |= UINT64_C(1) << (slot % 64);
        count[card]++;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int egpu__plugin_alloc_dir(const char *alloc_root, char *const *ids, size_t n, char *out,
                           size_t len)
{
    char **sorted = egpu_calloc(n ? n : 1, sizeof(char *));
    uint64_t h = UINT64_C(14695981039346656037); /* FNV-1a 64 */
    int w;

    if (sorted == NULL)
        return -ENOMEM;
    memcpy(sorted, ids, n * sizeof(char *));
    qsort(sorted, n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < n; i++) {
        for (const char *c = sorted[i]; *c; c++) {
            h ^= (unsigned char)*c;
            h *= UINT64_C(1099511628211);
        }
        h ^= '\n';
        h *= UINT64_C(1099511628211);
    }
    egpu_free(sorted);
    w = snprintf(out, len, "%s/%016" PRIx64, alloc_root, h);
    return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

/* Whether name is an allocation dir's: 16 lowercase hex digits. */
static bool is_alloc_name(const char *name)
{
    size_t i;

    for (i = 0; name[i] != '\0'; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    return i == EGPU_PLUGIN_DIR_NAME_LEN;
}

int egpu__plugin_mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);

    if (len == 0 || len >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, len + 1);
    for (char *c = buf + 1; *c; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -errno;
        *c = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* Bring the open allocation dir fd to the agent's owner and mode 0755. */
static int take_dir(int fd, const char *dir)
{
    struct stat st;

    if (fstat(fd, &st) != 0)
        return -errno;
    if (egpu__fs_is_private(&st) && (st.st_mode & 07777) == 0755)
        return 0;
    if (st.st_uid != geteuid() && fchown(fd, geteuid(), getegid()) != 0)
        return -errno;
    if (fchmod(fd, 0755) != 0)
        return -errno;
    egpu_log(EGPU_LOG_INFO, "allocation dir taken back dir=%s uid=%u mode=%04o", dir,
             (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
    return 0;
}

/* Make <fd>/shared a real directory of mode 01777 owned by the agent. */
static int make_shared(int fd)
{
    struct stat st;
    int sfd = -1, rc = 0;

    for (int tries = 0; tries < 2 && sfd < 0; tries++) {
        if (mkdirat(fd, EGPU_PLUGIN_SHARED_DIR, 01777) != 0 && errno != EEXIST)
            return -errno;
        rc = egpu__fs_open_dir(fd, EGPU_PLUGIN_SHARED_DIR, &sfd);
        if (rc == -ELOOP || rc == -ENOTDIR) {
            /* Not ours (an older agent's writable dir): away with it. */
            rc = egpu__fs_remove_tree(fd, EGPU_PLUGIN_SHARED_DIR, EGPU_PLUGIN_RM_BUDGET_MS);
            if (rc)
                return rc;
            rc = -ENOTDIR;
        } else if (rc)
            return rc;
    }
    if (sfd < 0)
        return rc;
    if (fstat(sfd, &st) != 0)
        rc = -errno;
    else if (st.st_uid != geteuid() && fchown(sfd, geteuid(), getegid()) != 0)
        rc = -errno;
    else if ((st.st_mode & 07777) != 01777 && fchmod(sfd, 01777) != 0)
        rc = -errno; /* mkdirat's mode went through the umask */
    close(sfd);
    return rc;
}

int egpu__plugin_open_alloc_dir(const char *alloc_root, const char *dir, bool create, bool shared,
                                bool *created, int *fd, struct egpu_error *err)
{
    size_t rl = strlen(alloc_root);
    const char *name = dir + rl + 1;
    bool made = false;
    int root = -1, dfd = -1, rc = 0;

    if (strncmp(dir, alloc_root, rl) != 0 || dir[rl] != '/' || strchr(name, '/') != NULL)
        rc = -EINVAL;
    if (rc == 0 && create)
        rc = egpu__plugin_mkdir_p(alloc_root);
    if (rc == 0) {
        root = open(alloc_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
            rc = -errno;
    }
    if (rc == 0 && create) {
        if (mkdirat(root, name, 0755) == 0)
            made = true;
        else if (errno != EEXIST)
            rc = -errno;
    }
    if (rc == 0)
        rc = egpu__fs_open_dir(root, name, &dfd);
    if (rc == 0)
        rc = take_dir(dfd, dir);
    if (rc == 0 && shared)
        rc = make_shared(dfd);
    if (rc) {
        if (dfd >= 0)
            close(dfd);
        if (made && egpu__fs_remove_tree(root, name, EGPU_PLUGIN_RM_BUDGET_MS) != 0)
            egpu_log(EGPU_LOG_WARN, "allocation dir not removed after a failure dir=%s", dir);
        if (root >= 0)
            close(root);
        if (rc == -ENOENT && !create)
            return egpu_error_set(err, rc, "allocation dir %s does not exist", dir);
        return egpu_error_set(
            err, rc, "allocation dir %s (--alloc-root %s) cannot be created: %s%s", dir, alloc_root,
            egpu_strerror(rc), rc == -ELOOP ? " (a symbolic link)" : "");
    }
    close(root);
    if (created != NULL)
        *created = made;
    *fd = dfd;
    return 0;
}

int egpu__plugin_remove_alloc_dir(const char *alloc_root, const char *dir)
{
    size_t rl = strlen(alloc_root);
    int root, rc;

    if (strncmp(dir, alloc_root, rl) != 0 || dir[rl] != '/')
        return -EINVAL;
    root = open(alloc_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return -errno;
    rc = egpu__fs_remove_tree(root, dir + rl + 1, EGPU_PLUGIN_RM_BUDGET_MS);
    close(root);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The record of what PreStartContainer wrote                               */

int egpu__plugin_record(struct egpu_plugin *p, const struct egpu_plugin_limits *l)
{
    int rc = 0;

    pthread_mutex_lock(&p->rec_lock);
    for (size_t i = 0; i < p->nrec; i++) {
        if (strcmp(p->rec[i].dir, l->dir) == 0) {
            p->rec[i] = *l;
            pthread_mutex_unlock(&p->rec_lock);
            return 0;
        }
    }
    if (p->nrec == p->caprec) {
        size_t cap = p->caprec ? p->caprec * 2 : 16;
        struct egpu_plugin_limits *grown = egpu_realloc(p->rec, cap * sizeof(*grown));

        if (grown == NULL)
            rc = -ENOMEM;
        else {
            p->rec = grown;
            p->caprec = cap;
        }
    }
    if (rc == 0)
        p->rec[p->nrec++] = *l;
    pthread_mutex_unlock(&p->rec_lock);
    return rc;
}

/* Forget the record of the dir name (the cleanup removed it). */
static void record_drop(struct egpu_plugin *p, const char *name)
{
    pthread_mutex_lock(&p->rec_lock);
    for (size_t i = 0; i < p->nrec; i++) {
        if (strcmp(p->rec[i].dir, name) == 0) {
            p->rec[i] = p->rec[--p->nrec];
            break;
        }
    }
    pthread_mutex_unlock(&p->rec_lock);
}

void egpu__plugin_each_limits(struct egpu_plugin *p, egpu_plugin_limits_cb cb, void *data)
{
    pthread_mutex_lock(&p->rec_lock);
    for (size_t i = 0; i < p->nrec; i++)
        cb(data, &p->rec[i]);
    pthread_mutex_unlock(&p->rec_lock);
}

/* Copy the string field key of doc into out (cap bytes). */
static int string_field(const json_t *doc, const char *key, char *out, size_t cap,
                        struct egpu_error *err)
{
    const json_t *v = json_object_get(doc, key);

    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= cap ||
        strlen(json_string_value(v)) != json_string_length(v))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: expected a string of 1 to %zu bytes", key,
                              cap - 1);
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

int egpu__plugin_limits_decode(const char *text, struct egpu_plugin_limits *out,
                               struct egpu_error *err)
{
    json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    const json_t *gpus, *core, *mem, *g;
    size_t k;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(doc)) {
        json_decref(doc);
        return egpu_error_set(err, EGPU_ESYNTAX, "not a JSON object");
    }
    gpus = json_object_get(doc, "gpus");
    core = json_object_get(doc, "core");
    mem = json_object_get(doc, "memory");
    rc = string_field(doc, "namespace", out->ns, sizeof(out->ns), err);
    if (rc == 0)
        rc = string_field(doc, "pod", out->pod, sizeof(out->pod), err);
    if (rc == 0)
        rc = string_field(doc, "container", out->container, sizeof(out->container), err);
    if (rc == 0 && (!json_is_array(gpus) || json_array_size(gpus) == 0 ||
                    json_array_size(gpus) > EGPU_NODE_GPUS_MAX))
        rc = egpu_error_set(err, EGPU_ESYNTAX, "gpus: expected an array of 1 to %d UUIDs",
                            EGPU_NODE_GPUS_MAX);
    json_array_foreach(gpus, k, g)
    {
        if (rc != 0)
            break;
        if (!json_is_string(g) || json_string_length(g) == 0 ||
            json_string_length(g) >= EGPU_UUID_MAX ||
            strlen(json_string_value(g)) != json_string_length(g))
            rc = egpu_error_set(err, EGPU_ESYNTAX, "gpus[%zu]: expected a GPU UUID", k);
        else
            memcpy(out->gpus[out->ngpus++], json_string_value(g), json_string_length(g) + 1);
    }
    if (rc == 0 &&
        (!json_is_integer(core) || json_integer_value(core) < 1 || json_integer_value(core) > 100))
        rc = egpu_error_set(err, EGPU_ESYNTAX, "core: expected an integer from 1 to 100");
    if (rc == 0 && (!json_is_integer(mem) || json_integer_value(mem) < 0 ||
                    json_integer_value(mem) > (json_int_t)UINT32_MAX))
        rc = egpu_error_set(err, EGPU_ESYNTAX, "memory: expected an integer from 0 to %" PRIu32,
                            UINT32_MAX);
    if (rc == 0) {
        out->core_pct = (uint32_t)json_integer_value(core);
        out->mem_mib = (uint32_t)json_integer_value(mem);
    }
    json_decref(doc);
    return rc;
}

/* The record at start: the limits.json of every allocation dir that is the
 * agent's own (owner and mode: no container can have written it). A dir an
 * older agent made writable is not believed; its next PreStartContainer
 * records it. */
static void record_load(struct egpu_plugin *p)
{
    DIR *d = opendir(p->alloc_root);
    const struct dirent *e;
    size_t loaded = 0, skipped = 0;

    while (d != NULL && (e = readdir(d)) != NULL) {
        struct egpu_plugin_limits *l;
        struct egpu_error err = {0};
        struct stat st;
        char *text = NULL;
        size_t len;
        int fd, rc;

        if (!is_alloc_name(e->d_name) || egpu__fs_open_dir(dirfd(d), e->d_name, &fd) != 0)
            continue;
        rc = fstat(fd, &st) == 0 && egpu__fs_is_private(&st) && (st.st_mode & 07777) == 0755
                 ? egpu__fs_read_at(fd, EGPU_PLUGIN_LIMITS_FILE, EGPU_PLUGIN_LIMITS_MAX, &text,
                                    &len, &st)
                 : -EPERM;
        close(fd);
        if (rc == -ENOENT)
            continue; /* Allocate made it; PreStartContainer did not write yet */
        l = rc == 0 ? egpu_malloc(sizeof(*l)) : NULL;
        if (rc == 0 && !egpu__fs_is_private(&st))
            rc = -EPERM;
        if (rc == 0 && l == NULL)
            rc = -ENOMEM;
        if (rc == 0)
            rc = egpu__plugin_limits_decode(text, l, &err);
        if (rc == 0) {
            memcpy(l->dir, e->d_name, EGPU_PLUGIN_DIR_NAME_LEN + 1);
            rc = egpu__plugin_record(p, l);
        }
        if (rc == 0)
            loaded++;
        else {
            skipped++;
            egpu_log(EGPU_LOG_WARN, "allocation not recorded dir=%s/%s/%s error=\"%s\"",
                     p->alloc_root, e->d_name, EGPU_PLUGIN_LIMITS_FILE,
                     err.msg[0]     ? err.msg
                     : rc == -EPERM ? "not the agent's own (owner or mode)"
                                    : egpu_strerror(rc));
        }
        egpu_free(l);
        egpu_free(text);
    }
    if (d != NULL)
        closedir(d);
    if (loaded || skipped)
        egpu_log(EGPU_LOG_INFO, "allocations recorded from disk loaded=%zu skipped=%zu", loaded,
                 skipped);
}

/* ------------------------------------------------------------------------ */
/* GetDevicePluginOptions, ListAndWatch                                     */

static int on_options(void *data, const struct egpu_grpc_request *req, struct egpu_buf *reply,
                      struct egpu_grpc_status *st)
{
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;

    (void)data;
    (void)req;
    (void)st;
    o.pre_start_required = 1;
    o.get_preferred_allocation_available = 1;
    return pb_pack(&o.base, reply);
}

/* The full device list of cards as a ListAndWatchResponse into out. */
static int pack_devices(const struct egpu_gpu_info *cards, size_t ncards, struct egpu_buf *out)
{
    static char healthy[] = EGPU_GPU_HEALTHY, unhealthy[] = EGPU_GPU_UNHEALTHY;
    V1beta1__ListAndWatchResponse r = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    V1beta1__Device *devs = egpu_calloc(DEVICES_MAX, sizeof(*devs));
    V1beta1__Device **ptrs = egpu_calloc(DEVICES_MAX, sizeof(*ptrs));
    char(*ids)[EGPU_PLUGIN_ID_MAX] = egpu_calloc(DEVICES_MAX, EGPU_PLUGIN_ID_MAX);
    size_t n = 0;
    int rc = 0;

    if (devs == NULL || ptrs == NULL || ids == NULL) {
        rc = -ENOMEM;
        goto out_free;
    }
    for (size_t c = 0; c < ncards; c++) {
        if (cards[c].uuid[0] == '\0')
            continue; /* never identified: no IDs to give */
        for (unsigned s = 0; s < EGPU_PLUGIN_IDS_PER_CARD; s++) {
            if (egpu__plugin_device_id(cards[c].uuid, s, ids[n], EGPU_PLUGIN_ID_MAX) != 0)
                break; /* cannot happen: UUIDs are at most 63 bytes with "-nn" room checked */
            devs[n] = (V1beta1__Device)V1BETA1__DEVICE__INIT;
            devs[n].id = ids[n];
            devs[n].health = cards[c].healthy ? healthy : unhealthy;
            ptrs[n] = &devs[n];
            n++;
        }
    }
    r.n_devices = n;
    r.devices = ptrs;
    rc = pb_pack(&r.base, out);
out_free:
    egpu_free(ids);
    egpu_free(ptrs);
    egpu_free(devs);
    return rc;
}

/* Send the current list on every open stream. Called with p->lock held. */
static void broadcast_locked(struct egpu_plugin *p)
{
    struct egpu_buf msg;
    int rc;

    egpu_buf_init(&msg, EGPU_GRPC_MSG_MAX);
    rc = pack_devices(p->cards, p->ncards, &msg);
    for (size_t i = 0; rc == 0 && i < p->nstreams; i++) {
        int src = egpu_grpc_stream_send(p->streams[i], msg.data, msg.len);

        if (src != 0 && src != -EPIPE)
            egpu_log(EGPU_LOG_WARN, "ListAndWatch send failed error=\"%s\"", egpu_strerror(src));
    }
    if (rc)
        egpu_log(EGPU_LOG_ERROR, "ListAndWatch: device list not built error=\"%s\"",
                 egpu_strerror(rc));
    egpu_buf_free(&msg);
}

static int on_list_and_watch(void *data, const struct egpu_grpc_request *req,
                             struct egpu_grpc_stream *stream, struct egpu_grpc_status *st)
{
    struct egpu_plugin *p = data;
    struct egpu_buf msg;
    int rc;

    (void)req;
    egpu_buf_init(&msg, EGPU_GRPC_MSG_MAX);
    pthread_mutex_lock(&p->lock);
    if (p->nstreams == STREAMS_MAX) {
        pthread_mutex_unlock(&p->lock);
        return egpu_grpc_status_set(st, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "ListAndWatch: %d streams open already", STREAMS_MAX);
    }
    rc = pack_devices(p->cards, p->ncards, &msg);
    if (rc == 0) {
        p->streams[p->nstreams++] = stream;
        rc = egpu_grpc_stream_send(stream, msg.data, msg.len);
        if (rc)
            egpu_log(EGPU_LOG_WARN, "ListAndWatch first send failed error=\"%s\"",
                     egpu_strerror(rc));
        rc = 0; /* accepted either way: the close callback will drop it */
        egpu_log(EGPU_LOG_INFO, "ListAndWatch opened devices=%zu",
                 p->ncards * EGPU_PLUGIN_IDS_PER_CARD);
    }
    pthread_mutex_unlock(&p->lock);
    egpu_buf_free(&msg);
    return rc;
}

static void on_stream_close(void *data, struct egpu_grpc_stream *stream, int reason)
{
    struct egpu_plugin *p = data;
    bool found = false;

    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->nstreams; i++) {
        if (p->streams[i] == stream) {
            p->streams[i] = p->streams[--p->nstreams];
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
    egpu_log(EGPU_LOG_INFO, "ListAndWatch closed reason=\"%s\"",
             reason ? egpu_strerror(reason) : "finished");
    if (found)
        egpu_grpc_stream_release(stream);
}

/* ------------------------------------------------------------------------ */
/* GetPreferredAllocation                                                   */

/* Pick size IDs from avail (n) with must (nmust) first, into out (the
 * caller's array of borrowed pointers, room for size). Returns the count. */
static size_t prefer_binpack(const struct egpu_gpu_info *cards, size_t ncards, char *const *avail,
                             size_t n, char *const *must, size_t nmust, size_t size, char **out)
{
    /* by_card[c][s]: the available ID string of card c slot s, or NULL */
    char *(*by_card)[EGPU_PLUGIN_IDS_PER_CARD] = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*by_card));
    unsigned free_ids[EGPU_NODE_GPUS_MAX] = {0};
    size_t got = 0;
    struct egpu_grpc_status st;

    if (by_card == NULL)
        return 0;
    for (size_t i = 0; i < nmust && got < size; i++)
        out[got++] = must[i];
    for (size_t i = 0; i < n; i++) {
        size_t c;
        unsigned s;
        bool dup = false;

        if (parse_id(cards, ncards, avail[i], &c, &s, &st) != 0 || by_card[c][s] != NULL)
            continue;
        for (size_t m = 0; m < nmust; m++)
            dup = dup || strcmp(must[m], avail[i]) == 0;
        if (dup)
            continue;
        by_card[c][s] = avail[i];
        free_ids[c]++;
    }
    while (got < size) {
        size_t need = size - got, best = SIZE_MAX;

        for (size_t c = 0; c < ncards; c++) {
            if (free_ids[c] == 0)
                continue;
            if (need >= EGPU_PLUGIN_IDS_PER_CARD) {
                /* whole cards first; else the emptiest card */
                if (best == SIZE_MAX || free_ids[c] > free_ids[best])
                    best = c;
            } else if (free_ids[c] >= need) {
                /* binpack: the fullest card that still fits */
                if (best == SIZE_MAX || free_ids[best] < need || free_ids[c] < free_ids[best])
                    best = c;
            } else if (best == SIZE_MAX ||
                       (free_ids[best] < need && free_ids[c] > free_ids[best])) {
                best = c; /* nothing fits: the card with most room */
            }
        }
        if (best == SIZE_MAX)
            break;
        for (unsigned s = 0; s < EGPU_PLUGIN_IDS_PER_CARD && got < size; s++) {
            if (by_card[best][s] != NULL) {
                out[got++] = by_card[best][s];
                by_card[best][s] = NULL;
                free_ids[best]--;
            }
        }
    }
    egpu_free(by_card);
    return got;
}

static int on_preferred(void *data, const struct egpu_grpc_request *req, struct egpu_buf *reply,
                        struct egpu_grpc_status *st)
{
    struct egpu_plugin *p = data;
    V1beta1__PreferredAllocationRequest *r;
    V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
    V1beta1__ContainerPreferredAllocationResponse *cr = NULL, **crp = NULL;
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    size_t ncards;
    int rc = 0;

    r = (V1beta1__PreferredAllocationRequest *)pb_unpack(
        &v1beta1__preferred_allocation_request__descriptor, req);
    if (cards == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (r == NULL) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                  "GetPreferredAllocation: request is not a "
                                  "PreferredAllocationRequest");
        goto out;
    }
    ncards = snapshot(p, cards);
    cr = egpu_calloc(r->n_container_requests ? r->n_container_requests : 1, sizeof(*cr));
    crp = egpu_calloc(r->n_container_requests ? r->n_container_requests : 1, sizeof(*crp));
    if (cr == NULL || crp == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < r->n_container_requests; i++) {
        V1beta1__ContainerPreferredAllocationRequest *c = r->container_requests[i];
        size_t size = c->allocation_size > 0 ? (size_t)c->allocation_size : 0;

        cr[i] = (V1beta1__ContainerPreferredAllocationResponse)
            V1BETA1__CONTAINER_PREFERRED_ALLOCATION_RESPONSE__INIT;
        crp[i] = &cr[i];
        cr[i].deviceids = egpu_calloc(size ? size : 1, sizeof(char *));
        if (cr[i].deviceids == NULL) {
            rc = -ENOMEM;
            goto out;
        }
        if (p->kube != NULL)
            cr[i].n_deviceids = egpu__prestart_prefer(
                p->kube, p->node, cards, ncards, c->available_deviceids, c->n_available_deviceids,
                c->must_include_deviceids, c->n_must_include_deviceids, size, cr[i].deviceids);
        if (cr[i].n_deviceids == 0)
            cr[i].n_deviceids = prefer_binpack(cards, ncards, c->available_deviceids,
                                               c->n_available_deviceids, c->must_include_deviceids,
                                               c->n_must_include_deviceids, size, cr[i].deviceids);
    }
    resp.n_container_responses = r->n_container_requests;
    resp.container_responses = crp;
    rc = pb_pack(&resp.base, reply);
out:
    for (size_t i = 0; cr != NULL && r != NULL && i < r->n_container_requests; i++)
        egpu_free(cr[i].deviceids);
    egpu_free(crp);
    egpu_free(cr);
    egpu_free(cards);
    if (r != NULL)
        pb_unpacked_free(&r->base);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Allocate                                                                 */

#define CTL_NODES    3                    /* nvidiactl, nvidia-uvm, nvidia-uvm-tools */
#define CDI_NAME_MAX (EGPU_UUID_MAX + 16) /* "nvidia.com/gpu=<uuid>" */
#define DEV_NODE_MAX 32                   /* "/dev/nvidia<minor>" */

/* What one container's answer points into. */
struct alloc_out {
    char uuids[EGPU_NODE_GPUS_MAX * EGPU_UUID_MAX];
    char cdi_names[EGPU_NODE_GPUS_MAX][CDI_NAME_MAX];
    char dev_paths[EGPU_NODE_GPUS_MAX][DEV_NODE_MAX];
    V1beta1__CDIDevice cdi[EGPU_NODE_GPUS_MAX];
    V1beta1__CDIDevice *cdip[EGPU_NODE_GPUS_MAX];
    V1beta1__DeviceSpec dev[EGPU_NODE_GPUS_MAX + CTL_NODES];
    V1beta1__DeviceSpec *devp[EGPU_NODE_GPUS_MAX + CTL_NODES];
    char dir[PATH_MAX];
    char preload[PATH_MAX + 32];
    char shared_host[PATH_MAX + 32];
    V1beta1__ContainerAllocateResponse__EnvsEntry env[2];
    V1beta1__ContainerAllocateResponse__EnvsEntry *envp[2];
    V1beta1__Mount mount[4];
    V1beta1__Mount *mountp[4];
    V1beta1__ContainerAllocateResponse resp;
};

/* --device-list-strategy cdi: "nvidia.com/gpu=<uuid>" per card in use. */
static void cdi_devices(const struct egpu_gpu_info *cards, size_t ncards, const unsigned *count,
                        struct alloc_out *o)
{
    size_t n = 0;

    for (size_t i = 0; i < ncards; i++) {
        if (count[i] == 0)
            continue;
        snprintf(o->cdi_names[n], CDI_NAME_MAX, "nvidia.com/gpu=%s", cards[i].uuid);
        o->cdi[n] = (V1beta1__CDIDevice)V1BETA1__CDIDEVICE__INIT;
        o->cdi[n].name = o->cdi_names[n];
        o->cdip[n] = &o->cdi[n];
        n++;
    }
    o->resp.n_cdi_devices = n;
    o->resp.cdi_devices = o->cdip;
}

/* --device-list-strategy device-nodes: /dev/nvidia<minor> per card in use
 * and the control nodes, rw, at the same path in the container. */
static void device_nodes(const struct egpu_gpu_info *cards, size_t ncards, const unsigned *count,
                         struct alloc_out *o)
{
    static char ctl[] = "/dev/nvidiactl", uvm[] = "/dev/nvidia-uvm",
                uvm_tools[] = "/dev/nvidia-uvm-tools", rw[] = "rw";
    char *ctl_paths[CTL_NODES] = {ctl, uvm, uvm_tools};
    size_t n = 0;

    for (size_t i = 0; i < ncards + CTL_NODES; i++) {
        char *path;

        if (i < ncards) {
            if (count[i] == 0)
                continue;
            snprintf(o->dev_paths[i], DEV_NODE_MAX, "/dev/nvidia%" PRIu32, cards[i].minor);
            path = o->dev_paths[i];
        } else
            path = ctl_paths[i - ncards];
        o->dev[n] = (V1beta1__DeviceSpec)V1BETA1__DEVICE_SPEC__INIT;
        o->dev[n].container_path = path;
        o->dev[n].host_path = path;
        o->dev[n].permissions = rw;
        o->devp[n] = &o->dev[n];
        n++;
    }
    o->resp.n_devices = n;
    o->resp.devices = o->devp;
}

static int allocate_one(struct egpu_plugin *p, const struct egpu_gpu_info *cards, size_t ncards,
                        const V1beta1__ContainerAllocateRequest *c, struct alloc_out *o,
                        struct egpu_grpc_status *st)
{
    static char env_visible[] = "NVIDIA_VISIBLE_DEVICES", env_dir[] = "EGPU_ALLOC_DIR",
                container_dir[] = EGPU_PLUGIN_CONTAINER_DIR, preload_path[] = "/etc/ld.so.preload",
                shared_path[] = EGPU_PLUGIN_CONTAINER_DIR "/" EGPU_PLUGIN_SHARED_DIR;
    unsigned count[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    bool shared = false, created = false;
    size_t used = 0;
    char text[PATH_MAX + 2];
    int rc, dfd = -1;

    if (c->n_devices_ids == 0)
        return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                    "Allocate: a container request without device IDs");
    rc = count_ids(cards, ncards, c->devices_ids, c->n_devices_ids, count, st);
    if (rc)
        return rc;
    for (size_t i = 0; i < ncards; i++) {
        int w;

        if (count[i] == 0)
            continue;
        if (!cards[i].healthy)
            return egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION,
                                        "Allocate: GPU %s is unhealthy (%s)", cards[i].uuid,
                                        cards[i].reason);
        shared = shared || count[i] < EGPU_PLUGIN_IDS_PER_CARD;
        w = snprintf(o->uuids + used, sizeof(o->uuids) - used, "%s%s", used ? "," : "",
                     cards[i].uuid);
        used += (size_t)w;
    }
    rc = egpu__plugin_alloc_dir(p->alloc_root, c->devices_ids, c->n_devices_ids, o->dir,
                                sizeof(o->dir));
    if (rc)
        return egpu_grpc_status_set(st, GRPC_STATUS_INTERNAL,
                                    "Allocate: allocation dir below %s: %s", p->alloc_root,
                                    egpu_strerror(rc));
    /* Under alloc_lock: the cleanup never sees the dir between its creation
     * and the fresh mtime that keeps it (see egpu__plugin_cleanup). The dir
     * is the agent's (0755); with a shared card, its subdir shared/ (01777,
     * sticky like /tmp) is where the container's processes, whatever their
     * user, create the interposer's regions. */
    pthread_mutex_lock(&p->alloc_lock);
    rc = egpu__plugin_open_alloc_dir(p->alloc_root, o->dir, true, shared, &created, &dfd, &err);
    if (rc == 0 && !created && futimens(dfd, NULL) != 0)
        rc = egpu_error_set(&err, -errno, "allocation dir %s: touch: %s", o->dir, strerror(errno));
    if (rc == 0 && shared) {
        snprintf(text, sizeof(text), "%s\n", p->interposer);
        rc = egpu__fs_write_at(dfd, o->dir, EGPU_PLUGIN_PRELOAD_FILE, text, strlen(text), 0644,
                               &err);
        snprintf(o->preload, sizeof(o->preload), "%s/%s", o->dir, EGPU_PLUGIN_PRELOAD_FILE);
        snprintf(o->shared_host, sizeof(o->shared_host), "%s/%s", o->dir, EGPU_PLUGIN_SHARED_DIR);
    }
    if (dfd >= 0)
        close(dfd);
    if (rc && created && egpu__plugin_remove_alloc_dir(p->alloc_root, o->dir) != 0)
        egpu_log(EGPU_LOG_WARN, "allocation dir not removed after a failed Allocate dir=%s",
                 o->dir);
    pthread_mutex_unlock(&p->alloc_lock);
    if (rc)
        return egpu_grpc_status_set(st, GRPC_STATUS_INTERNAL, "Allocate: %s", err.msg);
    o->resp = (V1beta1__ContainerAllocateResponse)V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
    for (int i = 0; i < 2; i++) {
        o->env[i] = (V1beta1__ContainerAllocateResponse__EnvsEntry)
            V1BETA1__CONTAINER_ALLOCATE_RESPONSE__ENVS_ENTRY__INIT;
        o->envp[i] = &o->env[i];
    }
    o->env[0].key = env_dir;
    o->env[0].value = container_dir;
    o->env[1].key = env_visible;
    o->env[1].value = o->uuids;
    o->resp.n_envs = p->strategy == EGPU_PLUGIN_ENVVAR ? 2 : 1;
    o->resp.envs = o->envp;
    if (p->strategy == EGPU_PLUGIN_CDI)
        cdi_devices(cards, ncards, count, o);
    else if (p->strategy == EGPU_PLUGIN_DEVICE_NODES)
        device_nodes(cards, ncards, count, o);
    for (int i = 0; i < 4; i++) {
        o->mount[i] = (V1beta1__Mount)V1BETA1__MOUNT__INIT;
        o->mountp[i] = &o->mount[i];
    }
    /* The allocation dir, read-only: what the agent wrote for the container
     * (limits.json, vcuda.conf) cannot be changed from inside. With a shared
     * card, its subdir shared/ read-write over it (container runtimes mount
     * a parent before its children, and the mount point exists inside the
     * read-only parent): the interposer's regions live there. */
    o->mount[0].container_path = container_dir;
    o->mount[0].host_path = o->dir;
    o->mount[0].read_only = 1;
    o->resp.n_mounts = 1;
    if (shared) {
        o->mount[1].container_path = shared_path;
        o->mount[1].host_path = o->shared_host;
        o->mount[1].read_only = 0;
        o->mount[2].container_path = p->interposer;
        o->mount[2].host_path = p->interposer;
        o->mount[2].read_only = 1;
        o->mount[3].container_path = preload_path;
        o->mount[3].host_path = o->preload;
        o->mount[3].read_only = 1;
        o->resp.n_mounts = 4;
    }
    o->resp.mounts = o->mountp;
    egpu_log(EGPU_LOG_INFO, "allocated ids=%zu gpus=%s shared=%s dir=%s", c->n_devices_ids,
             o->uuids, shared ? "true" : "false", o->dir);
    return 0;
}

static int on_allocate(void *data, const struct egpu_grpc_request *req, struct egpu_buf *reply,
                       struct egpu_grpc_status *st)
{
    struct egpu_plugin *p = data;
    V1beta1__AllocateRequest *r;
    V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    struct alloc_out *outs = NULL;
    V1beta1__ContainerAllocateResponse **ptrs = NULL;
    size_t ncards, n = 0;
    int rc = 0;

    r = (V1beta1__AllocateRequest *)pb_unpack(&v1beta1__allocate_request__descriptor, req);
    if (cards == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (r == NULL) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                  "Allocate: request is not an AllocateRequest");
        goto out;
    }
    if (r->n_container_requests == 0) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                  "Allocate: no container_requests");
        goto out;
    }
    n = r->n_container_requests;
    ncards = snapshot(p, cards);
    outs = egpu_calloc(n, sizeof(*outs));
    ptrs = egpu_calloc(n, sizeof(*ptrs));
    if (outs == NULL || ptrs == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = allocate_one(p, cards, ncards, r->container_requests[i], &outs[i], st);
        ptrs[i] = &outs[i].resp;
    }
    if (rc == 0) {
        resp.n_container_responses = n;
        resp.container_responses = ptrs;
        rc = pb_pack(&resp.base, reply);
    }
    /* The kubelet records these IDs as the container's once this returns:
     * the marker's thread learns the owner from PodResources and marks it
     * allocated then, not at PreStartContainer (after the image pull). */
    for (size_t i = 0; rc == 0 && i < n; i++)
        egpu__marker_add(p->marker, r->container_requests[i]->devices_ids,
                         r->container_requests[i]->n_devices_ids);
out:
    pthread_mutex_lock(&p->lock);
    if (rc == 0)
        p->stats.allocations += n;
    else
        p->stats.alloc_errors++;
    pthread_mutex_unlock(&p->lock);
    if (rc)
        egpu_log(EGPU_LOG_WARN, "Allocate refused error=\"%s\"",
                 st->msg[0] ? st->msg : egpu_strerror(rc));
    egpu_free(ptrs);
    egpu_free(outs);
    egpu_free(cards);
    if (r != NULL)
        pb_unpacked_free(&r->base);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* PreStartContainer                                                        */

/* What PreStartContainer and the allocation marker need of the plugin (borrowed: p outlives
 * both). */
static struct egpu_prestart_config prestart_config(struct egpu_plugin *p)
{
    return (struct egpu_prestart_config){.kube = p->kube,
                                         .node = p->node,
                                         .pod_resources = p->pod_resources,
                                         .alloc_root = p->alloc_root,
                                         .ctx_extra_mib = p->ctx_extra_mib,
                                         .allocated_lock = &p->allocated_lock};
}

static int on_prestart(void *data, const struct egpu_grpc_request *req, struct egpu_buf *reply,
                       struct egpu_grpc_status *st)
{
    struct egpu_plugin *p = data;
    V1beta1__PreStartContainerRequest *r;
    V1beta1__PreStartContainerResponse resp = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    unsigned count[EGPU_NODE_GPUS_MAX];
    struct egpu_plugin_limits *wrote = egpu_calloc(1, sizeof(*wrote));
    size_t ncards;
    bool mismatch = false, marked = false;
    int rc = 0;

    r = (V1beta1__PreStartContainerRequest *)pb_unpack(
        &v1beta1__pre_start_container_request__descriptor, req);
    if (cards == NULL || wrote == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (r == NULL) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                  "PreStartContainer: request is not a PreStartContainerRequest");
        goto out;
    }
    ncards = snapshot(p, cards);
    if (r->n_devices_ids == 0) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                  "PreStartContainer: no device IDs");
        goto out;
    }
    rc = count_ids(cards, ncards, r->devices_ids, r->n_devices_ids, count, st);
    if (rc == 0 && p->kube != NULL) {
        struct egpu_prestart_config pc = prestart_config(p);

        rc = egpu__prestart_run(&pc, cards, ncards, r->devices_ids, r->n_devices_ids, &mismatch,
                                &marked, wrote, st);
        /* The files are on disk even when the API server then failed: the
         * record says what is there. */
        if (wrote->dir[0] != '\0' && egpu__plugin_record(p, wrote) != 0)
            egpu_log(EGPU_LOG_WARN, "allocation not recorded (out of memory) pod=%s/%s dir=%s",
                     wrote->ns, wrote->pod, wrote->dir);
    }
    if (rc == 0)
        rc = pb_pack(&resp.base, reply);
out:
    if (mismatch) {
        pthread_mutex_lock(&p->lock);
        p->stats.mismatches++;
        pthread_mutex_unlock(&p->lock);
    }
    if (rc)
        egpu_log(EGPU_LOG_WARN, "PreStartContainer refused error=\"%s\"",
                 st->msg[0] ? st->msg : egpu_strerror(rc));
    else {
        pthread_mutex_lock(&p->lock);
        p->stats.prestarts++;
        p->stats.marked_prestart += marked;
        pthread_mutex_unlock(&p->lock);
    }
    egpu_free(wrote);
    egpu_free(cards);
    if (r != NULL)
        pb_unpacked_free(&r->base);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Life cycle                                                               */

static char *dup_or(const char *s, const char *def)
{
    return egpu_strdup(s != NULL ? s : def);
}

int egpu__plugin_new(const struct egpu_plugin_config *cfg, struct egpu_plugin **out,
                     struct egpu_error *err)
{
    struct egpu_plugin *p = egpu_calloc(1, sizeof(*p));
    int rc, w1, w2;

    if (p == NULL)
        return egpu_error_set(err, -ENOMEM, "device plugin: out of memory");
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->alloc_lock, NULL);
    pthread_mutex_init(&p->allocated_lock, NULL);
    pthread_mutex_init(&p->rec_lock, NULL);
    p->gpus = cfg->gpus;
    p->kube = cfg->kube;
    p->strategy = cfg->strategy;
    p->ctx_extra_mib = cfg->ctx_extra_mib;
    p->dir = dup_or(cfg->dir, "/var/lib/kubelet/device-plugins");
    p->alloc_root = dup_or(cfg->alloc_root, "/var/lib/elastic-gpu/alloc");
    p->interposer = dup_or(cfg->interposer, EGPU_PLUGIN_INTERPOSER);
    p->pod_resources = dup_or(cfg->pod_resources, "/var/lib/kubelet/pod-resources/kubelet.sock");
    p->node = dup_or(cfg->node, "");
    if (p->dir == NULL || p->alloc_root == NULL || p->interposer == NULL ||
        p->pod_resources == NULL || p->node == NULL) {
        egpu__plugin_free(p);
        return egpu_error_set(err, -ENOMEM, "device plugin: out of memory");
    }
    w1 = snprintf(p->socket, sizeof(p->socket), "%s/%s", p->dir, EGPU_PLUGIN_SOCKET);
    w2 = snprintf(p->kubelet, sizeof(p->kubelet), "%s/%s", p->dir, EGPU_PLUGIN_KUBELET);
    if (w1 < 0 || w1 > 107 || w2 < 0 || w2 > 107) {
        egpu__plugin_free(p);
        return egpu_error_set(err, -ENAMETOOLONG,
                              "--device-plugin-dir %s: socket paths in it would pass 107 bytes",
                              cfg->dir);
    }
    rc = egpu_gpus_list(p->gpus, p->cards, EGPU_NODE_GPUS_MAX, &p->ncards, err);
    if (!rc)
        record_load(p);
    if (!rc && p->kube != NULL) {
        struct egpu_prestart_config pc = prestart_config(p);

        rc = egpu__marker_new(&pc, &p->marker);
        if (rc)
            egpu_error_set(err, rc, "device plugin: the allocated marker's thread: %s",
                           egpu_strerror(rc));
    }
    if (!rc)
        rc = egpu_grpc_server_new(p->socket, 4, &p->srv, err);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                                    on_options, p);
    if (!rc)
        rc = egpu_grpc_server_stream(p->srv, "/v1beta1.DevicePlugin/ListAndWatch",
                                     on_list_and_watch, on_stream_close, p);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, "/v1beta1.DevicePlugin/GetPreferredAllocation",
                                    on_preferred, p);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, "/v1beta1.DevicePlugin/Allocate", on_allocate, p);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, "/v1beta1.DevicePlugin/PreStartContainer", on_prestart,
                                    p);
    if (rc) {
        if (err != NULL && err->code == 0)
            egpu_error_set(err, rc, "device plugin: %s", egpu_strerror(rc));
        egpu__plugin_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void egpu__plugin_free(struct egpu_plugin *p)
{
    if (p == NULL)
        return;
    egpu_grpc_server_free(p->srv); /* stops it: every stream's close callback has run */
    egpu__marker_free(p->marker);  /* after the server: no Allocate queues any more */
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->allocated_lock);
    pthread_mutex_destroy(&p->alloc_lock);
    pthread_mutex_destroy(&p->rec_lock);
    egpu_free(p->rec);
    egpu_free(p->dir);
    egpu_free(p->alloc_root);
    egpu_free(p->interposer);
    egpu_free(p->pod_resources);
    egpu_free(p->node);
    egpu_free(p);
}

int egpu__plugin_serve(struct egpu_plugin *p, struct egpu_error *err)
{
    int rc;

    if (p->running)
        egpu_grpc_server_stop(p->srv);
    p->running = false;
    rc = egpu__plugin_mkdir_p(p->dir);
    if (rc)
        return egpu_error_set(err, rc, "--device-plugin-dir %s: %s", p->dir, egpu_strerror(rc));
    rc = egpu_grpc_server_start(p->srv, err);
    if (rc)
        return rc;
    p->running = true;
    egpu_log(EGPU_LOG_INFO, "device plugin serving socket=%s", p->socket);
    return 0;
}

int egpu__plugin_register(struct egpu_plugin *p, struct egpu_error *err)
{
    static char version[] = "v1beta1", endpoint[] = EGPU_PLUGIN_SOCKET,
                resource[] = EGPU_RES_GPU_CORE;
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    V1beta1__RegisterRequest r = V1BETA1__REGISTER_REQUEST__INIT;
    struct egpu_buf msg, reply;
    int rc;

    o.pre_start_required = 1;
    o.get_preferred_allocation_available = 1;
    r.version = version;
    r.endpoint = endpoint;
    r.resource_name = resource;
    r.options = &o;
    egpu_buf_init(&msg, 4096);
    egpu_buf_init(&reply, 4096);
    rc = pb_pack(&r.base, &msg);
    if (rc)
        egpu_error_set(err, rc, "Register: %s", egpu_strerror(rc));
    else
        rc = egpu_grpc_call(p->kubelet, "/v1beta1.Registration/Register", msg.data, msg.len, 15000,
                            &reply, err);
    egpu_buf_free(&msg);
    egpu_buf_free(&reply);
    if (rc == 0) {
        pthread_mutex_lock(&p->lock);
        p->stats.registrations++;
        pthread_mutex_unlock(&p->lock);
        egpu_log(EGPU_LOG_INFO, "registered kubelet=%s resource=%s endpoint=%s", p->kubelet,
                 EGPU_RES_GPU_CORE, EGPU_PLUGIN_SOCKET);
    }
    return rc;
}

static bool cards_differ(const struct egpu_gpu_info *a, size_t na, const struct egpu_gpu_info *b,
                         size_t nb)
{
    if (na != nb)
        return true;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].uuid, b[i].uuid) != 0 || a[i].healthy != b[i].healthy)
            return true;
    return false;
}

int egpu__plugin_refresh(struct egpu_plugin *p, bool *changed, struct egpu_error *err)
{
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    size_t n;
    bool diff = false;
    int rc;

    if (cards == NULL)
        return egpu_error_set(err, -ENOMEM, "device plugin: out of memory");
    rc = egpu_gpus_list(p->gpus, cards, EGPU_NODE_GPUS_MAX, &n, err);
    if (rc == 0) {
        pthread_mutex_lock(&p->lock);
        diff = cards_differ(p->cards, p->ncards, cards, n);
        memcpy(p->cards, cards, n * sizeof(cards[0]));
        p->ncards = n;
        if (diff)
            broadcast_locked(p);
        pthread_mutex_unlock(&p->lock);
        if (diff)
            for (size_t i = 0; i < n; i++)
                egpu_log(EGPU_LOG_INFO, "gpu index=%u uuid=%s health=%s reason=\"%s\"",
                         cards[i].index, cards[i].uuid,
                         cards[i].healthy ? EGPU_GPU_HEALTHY : EGPU_GPU_UNHEALTHY, cards[i].reason);
    }
    if (changed != NULL)
        *changed = diff;
    egpu_free(cards);
    return rc;
}

bool egpu__plugin_socket_exists(const struct egpu_plugin *p)
{
    struct stat st;

    return stat(p->socket, &st) == 0 && S_ISSOCK(st.st_mode);
}

size_t egpu__plugin_cards(struct egpu_plugin *p, struct egpu_gpu_info *out, size_t cap)
{
    size_t n;

    pthread_mutex_lock(&p->lock);
    n = p->ncards < cap ? p->ncards : cap;
    memcpy(out, p->cards, n * sizeof(out[0]));
    pthread_mutex_unlock(&p->lock);
    return n;
}

void egpu__plugin_stats(struct egpu_plugin *p, struct egpu_plugin_stats *out)
{
    struct egpu__marker_stats ms;

    egpu__marker_stats(p->marker, &ms);
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    out->marked_allocate = ms.marked;
    out->cards = p->ncards;
    out->healthy = 0;
    for (size_t i = 0; i < p->ncards; i++)
        out->healthy += p->cards[i].healthy;
    pthread_mutex_unlock(&p->lock);
}

/* ------------------------------------------------------------------------ */
/* Cleanup of allocation dirs                                               */

#define DIR_NAME_LEN EGPU_PLUGIN_DIR_NAME_LEN

/* The dir names (DIR_NAME_LEN + 1 bytes each) of every container's gpu-core
 * IDs in r, into *out (egpu_free) and *n. Returns 0 or -ENOMEM. */
static int held_dirs(const struct egpu_plugin *p, const V1__ListPodResourcesResponse *r,
                     char (**out)[DIR_NAME_LEN + 1], size_t *n)
{
    char(*names)[DIR_NAME_LEN + 1] = NULL;
    size_t count = 0, root = strlen(p->alloc_root) + 1;

    for (size_t i = 0; i < r->n_pod_resources; i++) {
        const V1__PodResources *pr = r->pod_resources[i];

        for (size_t c = 0; c < pr->n_containers; c++) {
            const V1__ContainerResources *cr = pr->containers[c];
            char **ids;
            size_t nids = 0, total = 0;
            char path[PATH_MAX];
            void *grown;
            int rc;

            for (size_t d = 0; d < cr->n_devices; d++)
                if (cr->devices[d]->resource_name != NULL &&
                    strcmp(cr->devices[d]->resource_name, EGPU_RES_GPU_CORE) == 0)
                    total += cr->devices[d]->n_device_ids;
            if (total == 0)
                continue;
            ids = egpu_calloc(total, sizeof(*ids));
            grown = egpu_realloc(names, (count + 1) * sizeof(*names));
            if (grown != NULL)
                names = grown;
            if (ids == NULL || grown == NULL) {
                egpu_free(ids);
                egpu_free(names);
                return -ENOMEM;
            }
            for (size_t d = 0; d < cr->n_devices; d++)
                if (cr->devices[d]->resource_name != NULL &&
                    strcmp(cr->devices[d]->resource_name, EGPU_RES_GPU_CORE) == 0)
                    for (size_t k = 0; k < cr->devices[d]->n_device_ids; k++)
                        ids[nids++] = cr->devices[d]->device_ids[k];
            rc = egpu__plugin_alloc_dir(p->alloc_root, ids, nids, path, sizeof(path));
            egpu_free(ids);
            if (rc == 0 && strlen(path) == root + DIR_NAME_LEN)
                memcpy(names[count++], path + root, DIR_NAME_LEN + 1);
        }
    }
    *out = names;
    *n = count;
    return 0;
}

int egpu__plugin_cleanup(struct egpu_plugin *p, long grace_s, unsigned *removed,
                         struct egpu_error *err)
{
    V1__ListPodResourcesResponse *r = NULL;
    char(*held)[DIR_NAME_LEN + 1] = NULL;
    size_t nheld = 0;
    unsigned gone = 0;
    const struct dirent *e;
    struct timespec now;
    DIR *d;
    int rc;

    if (removed != NULL)
        *removed = 0;
    rc = egpu__podres_list(p->pod_resources, &r, err);
    if (rc) {
        if (!p->cleanup_failed)
            egpu_log(EGPU_LOG_WARN,
                     "allocation dirs not cleaned up: PodResources List failed error=\"%s\"",
                     err != NULL ? err->msg : egpu_strerror(rc));
        p->cleanup_failed = true;
        return rc;
    }
    p->cleanup_failed = false;
    rc = held_dirs(p, r, &held, &nheld);
    v1__list_pod_resources_response__free_unpacked(r, &egpu__pb_allocator);
    if (rc)
        return egpu_error_set(err, rc, "cleanup: out of memory");
    d = opendir(p->alloc_root);
    if (d == NULL) {
        rc = errno == ENOENT ? 0 : -errno;
        egpu_free(held);
        if (rc)
            egpu_error_set(err, rc, "--alloc-root %s: %s", p->alloc_root, strerror(-rc));
        return rc;
    }
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        bool keep = !is_alloc_name(e->d_name);

        for (size_t i = 0; i < nheld && !keep; i++)
            keep = strcmp(held[i], e->d_name) == 0;
        if (keep)
            continue;
        /* Allocate touches its dir under alloc_lock; a dir younger than the
         * grace may belong to a container the kubelet is still admitting. */
        pthread_mutex_lock(&p->alloc_lock);
        clock_gettime(CLOCK_REALTIME, &now);
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
            (long)(now.tv_sec - st.st_mtim.tv_sec) >= grace_s) {
            int rrc = egpu__fs_remove_tree(dirfd(d), e->d_name, EGPU_PLUGIN_RM_BUDGET_MS);

            if (rrc == 0) {
                record_drop(p, e->d_name);
                gone++;
                egpu_log(EGPU_LOG_INFO, "allocation dir removed dir=%s/%s (no container holds it)",
                         p->alloc_root, e->d_name);
            } else
                egpu_log(EGPU_LOG_WARN, "allocation dir not removed dir=%s/%s error=\"%s\"",
                         p->alloc_root, e->d_name, egpu_strerror(rrc));
        }
        pthread_mutex_unlock(&p->alloc_lock);
    }
    closedir(d);
    egpu_free(held);
    if (removed != NULL)
        *removed = gone;
    return 0;
}
