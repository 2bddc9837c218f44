/* agent/record.c - the agent's record of what PreStartContainer wrote into
 * each allocation dir, the source of the allocation metrics (record_int.h).
 *
 * Kept in memory (one entry per dir, under the record's lock) and rebuilt at start
 * from the limits.json of every allocation dir that is the agent's own:
 * regular files of at most EGPU_ALLOCDIR_LIMITS_MAX bytes, owned by the agent
 * and writable by nobody else, in a dir of the agent's with mode 0755. No
 * file a container can write is ever believed. The cleanup (cleanup.c)
 * drops the entry of a dir it removes.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "allocfs_int.h"
#include "egpu/log.h"
#include "record_int.h"

void egpu__record_init(struct egpu__record *r)
{
    pthread_mutex_init(&r->lock, NULL);
    r->items = NULL;
    r->n = r->cap = 0;
}

void egpu__record_close(struct egpu__record *r)
{
    pthread_mutex_destroy(&r->lock);
    egpu_free(r->items);
    r->items = NULL;
    r->n = r->cap = 0;
}

int egpu__record_put(struct egpu__record *r, const struct egpu__alloc_limits *l)
{
    int rc = 0;

    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n; i++) {
        if (strcmp(r->items[i].dir, l->dir) == 0) {
            r->items[i] = *l;
            pthread_mutex_unlock(&r->lock);
            return 0;
        }
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        struct egpu__alloc_limits *grown = egpu_realloc(r->items, cap * sizeof(*grown));

        if (grown == NULL)
            rc = -ENOMEM;
        else {
            r->items = grown;
            r->cap = cap;
        }
    }
    if (rc == 0)
        r->items[r->n++] = *l;
    pthread_mutex_unlock(&r->lock);
    return rc;
}

void egpu__record_drop(struct egpu__record *r, const char *name)
{
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n; i++) {
        if (strcmp(r->items[i].dir, name) == 0) {
            r->items[i] = r->items[--r->n];
            break;
        }
    }
    pthread_mutex_unlock(&r->lock);
}

void egpu__record_each(struct egpu__record *r, egpu__record_cb cb, void *data)
{
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n; i++)
        cb(data, &r->items[i]);
    pthread_mutex_unlock(&r->lock);
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

int egpu__record_decode(const char *text, struct egpu__alloc_limits *out, struct egpu_error *err)
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

/* A dir an older agent made writable is not believed; its next
 * PreStartContainer records it. */
void egpu__record_load(struct egpu__record *r, const char *alloc_root)
{
    DIR *d = opendir(alloc_root);
    const struct dirent *e;
    size_t loaded = 0, skipped = 0;

    while (d != NULL && (e = readdir(d)) != NULL) {
        struct egpu__alloc_limits *l;
        struct egpu_error err = {0};
        struct stat st;
        char *text = NULL;
        size_t len;
        int fd, rc;

        if (!egpu__allocdir_is_name(e->d_name) || egpu__fs_open_dir(dirfd(d), e->d_name, &fd) != 0)
            continue;
        rc = fstat(fd, &st) == 0 && egpu__fs_is_private(&st) && (st.st_mode & 07777) == 0755
                 ? egpu__fs_read_at(fd, EGPU_ALLOCDIR_LIMITS_FILE, EGPU_ALLOCDIR_LIMITS_MAX, &text,
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
            rc = egpu__record_decode(text, l, &err);
        if (rc == 0) {
            memcpy(l->dir, e->d_name, EGPU_ALLOCDIR_NAME_LEN + 1);
            rc = egpu__record_put(r, l);
        }
        if (rc == 0)
            loaded++;
        else {
            skipped++;
            egpu_log(EGPU_LOG_WARN, "allocation not recorded dir=%s/%s/%s error=\"%s\"", alloc_root,
                     e->d_name, EGPU_ALLOCDIR_LIMITS_FILE,
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
        egpu_log(EGPU_LOG_NOTICE, "allocations recorded from disk loaded=%zu skipped=%zu", loaded,
                 skipped);
}
