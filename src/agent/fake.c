/* agent/fake.c - the fake GPU backend, for machines without NVIDIA GPUs.
 *
 * `--fake-gpus 1xT4-16GB,4xA100-40GB` (or $EGPU_FAKE_GPUS) describes the
 * cards: groups of <count>x<model>-<memory><unit>, indexed in order from 0.
 * The agent then publishes and serves these cards exactly as it would real
 * ones, which is what tests, demos and the kind-cluster walkthrough need.
 *
 * DESIGN: UUIDs are a hash of the node name and the index, so a restarted
 * agent (or the same spec on the same node) finds the GPU objects it wrote
 * before, and two nodes never share a UUID. Health and links start healthy
 * and PHB-within-a-group/SYS-between-groups; tests change them through
 * egpu_gpus_fake_set_health/_set_link, and a health change wakes a thread
 * in egpu_gpus_wait, as an XID event does for NVML.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "egpu/log.h"
#include "gpus_int.h"

#define FAKE_FORM                                                                         \
    "<count>x<model>-<memory>GB[,...] (count 1..64, memory in GB, GiB, MB or MiB), e.g. " \
    "2xA100-80GB or 1xT4-16GB,4xA100-40GB"
#define FAKE_MEM_MAX_MIB ((uint64_t)4 << 20) /* 4 TiB: anything larger is a typo */

struct fake {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC; signalled when changes grows */
    unsigned changes;    /* health changes not yet reported by a wait */
    size_t n;
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    uint8_t group[EGPU_NODE_GPUS_MAX];                     /* spec group of each card */
    uint8_t links[EGPU_NODE_GPUS_MAX][EGPU_NODE_GPUS_MAX]; /* enum egpu_gpu_link */
};

static int bad_spec(struct egpu_error *err, int code, const char *spec, const char *fmt, ...)
    EGPU_PRINTF(4, 5);

static int bad_spec(struct egpu_error *err, int code, const char *spec, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return egpu_error_set(err, code, "fake GPUs \"%.100s\": %s; expected %s", spec, why, FAKE_FORM);
}

/* Digits at *p as a number, stopping (as EGPU_ERANGE) once above max. */
static int parse_count(const char **p, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    if (!isdigit((unsigned char)**p))
        return EGPU_ESYNTAX;
    for (; isdigit((unsigned char)**p); (*p)++) {
        v = v * 10 + (uint64_t)(**p - '0');
        if (v > max)
            return EGPU_ERANGE;
    }
    *out = v;
    return 0;
}

static bool is_model_char(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.';
}

/* The memory size at the end of model (len bytes): "-<digits><unit>". */
static int parse_memory(const char *spec, const char *model, size_t len, uint64_t *mem_mib,
                        struct egpu_error *err)
{
    const char *dash = NULL, *p, *unit;
    size_t ulen;
    uint64_t v, mult;
    int rc;

    for (size_t i = 0; i < len; i++) {
        if (model[i] == '-')
            dash = model + i;
    }
    if (dash == NULL || !isdigit((unsigned char)dash[1]))
        return bad_spec(err, EGPU_ESYNTAX, spec, "model \"%.*s\" does not end in its memory size",
                        (int)len, model);
    if (dash == model)
        return bad_spec(err, EGPU_ESYNTAX, spec, "no model name before \"%.*s\"", (int)len, model);
    p = dash + 1;
    rc = parse_count(&p, FAKE_MEM_MAX_MIB, &v);
    unit = p;
    ulen = (size_t)(model + len - unit);
    if (ulen == 2 && strncasecmp(unit, "GB", 2) == 0)
        mult = 1024;
    else if (ulen == 3 && strncasecmp(unit, "GiB", 3) == 0)
        mult = 1024;
    else if (ulen == 2 && strncasecmp(unit, "MB", 2) == 0)
        mult = 1;
    else if (ulen == 3 && strncasecmp(unit, "MiB", 3) == 0)
        mult = 1;
    else
        return bad_spec(err, EGPU_ESYNTAX, spec,
                        "memory unit of \"%.*s\" is not GB, GiB, MB or MiB", (int)len, model);
    if (rc == 0 && (v == 0 || v * mult > FAKE_MEM_MAX_MIB))
        rc = EGPU_ERANGE;
    if (rc)
        return bad_spec(err, EGPU_ERANGE, spec, "memory of \"%.*s\" is not 1 MiB..4 TiB", (int)len,
                        model);
    *mem_mib = v * mult;
    return 0;
}

static uint64_t fnv1a(const void *data, size_t len, uint64_t h)
{
    const unsigned char *p = data;

    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* "GPU-xxxxxxxx-xxxx-4xxx-8xxx-xxxxxxxxxxxx" from node and index. */
static void fake_uuid(const char *node, uint32_t index, char *out, size_t len)
{
    uint64_t h = fnv1a(node, strlen(node), 0xcbf29ce484222325ULL);
    uint64_t hi, lo;

    h = fnv1a("/", 1, h);
    h = fnv1a(&index, sizeof(index), h);
    hi = mix64(h);
    lo = mix64(h ^ 0x9e3779b97f4a7c15ULL);
    snprintf(out, len, "GPU-%08" PRIx64 "-%04" PRIx64 "-4%03" PRIx64 "-%04" PRIx64 "-%012" PRIx64,
             hi >> 32, (hi >> 16) & 0xffff, hi & 0xfff, 0x8000 | (lo >> 50),
             (uint64_t)(lo & 0xffffffffffffULL));
}

static int parse_spec(struct fake *f, const char *spec, const char *node, struct egpu_error *err)
{
    const char *p = spec;
    unsigned group = 0;

    for (;;) {
        const char *model, *end;
        uint64_t count, mem_mib = 0;
        size_t len;
        int rc;

        while (*p == ' ')
            p++;
        rc = parse_count(&p, EGPU_NODE_GPUS_MAX, &count);
        if (rc == EGPU_ESYNTAX)
            return bad_spec(err, rc, spec, "group %u does not start with a card count", group + 1);
        if (rc || count == 0)
            return bad_spec(err, EGPU_ERANGE, spec, "card count of group %u is not 1..%d",
                            group + 1, EGPU_NODE_GPUS_MAX);
        if (*p != 'x' && *p != 'X')
            return bad_spec(err, EGPU_ESYNTAX, spec, "no 'x' after the count of group %u",
                            group + 1);
        model = ++p;
        end = strchr(model, ',');
        if (end == NULL)
            end = model + strlen(model);
        len = (size_t)(end - model);
        while (len > 0 && model[len - 1] == ' ')
            len--;
        if (len == 0)
            return bad_spec(err, EGPU_ESYNTAX, spec, "no model in group %u", group + 1);
        if (len >= EGPU_GPU_MODEL_MAX)
            return bad_spec(err, EGPU_ERANGE, spec, "model of group %u is longer than %d",
                            group + 1, EGPU_GPU_MODEL_MAX - 1);
        for (size_t i = 0; i < len; i++) {
            if (!is_model_char(model[i]))
                return bad_spec(err, EGPU_ESYNTAX, spec,
                                "'%c' in model \"%.*s\" (letters, digits, '-', '_', '.')", model[i],
                                (int)len, model);
        }
        rc = parse_memory(spec, model, len, &mem_mib, err);
        if (rc)
            return rc;
        if (f->n + count > EGPU_NODE_GPUS_MAX)
            return bad_spec(err, EGPU_ERANGE, spec, "more than %d cards", EGPU_NODE_GPUS_MAX);
        for (uint64_t i = 0; i < count; i++) {
            struct egpu_gpu_info *c = &f->cards[f->n];

            c->index = (uint32_t)f->n;
            c->minor = c->index;
            memcpy(c->model, model, len);
            c->model[len] = '\0';
            c->mem_mib = mem_mib;
            c->healthy = true;
            fake_uuid(node, c->index, c->uuid, sizeof(c->uuid));
            f->group[f->n++] = (uint8_t)group;
        }
        group++;
        if (*end == '\0')
            return 0;
        p = end + 1;
    }
}

int egpu__fake_open(const char *spec, const char *node, void **impl, struct egpu_error *err)
{
    pthread_condattr_t attr;
    struct fake *f;
    int rc;

    if (spec == NULL || spec[0] == '\0')
        return egpu_error_set(err, EGPU_ESYNTAX, "fake GPUs: empty spec; expected %s", FAKE_FORM);
    f = egpu_calloc(1, sizeof(*f));
    if (f == NULL)
        return egpu_error_set(err, -ENOMEM, "fake GPUs: out of memory");
    rc = parse_spec(f, spec, node, err);
    if (rc) {
        egpu_free(f);
        return rc;
    }
    for (size_t a = 0; a < f->n; a++) {
        for (size_t b = 0; b < f->n; b++)
            f->links[a][b] = f->group[a] == f->group[b] ? EGPU_LINK_PHB : EGPU_LINK_SYS;
    }
    pthread_mutex_init(&f->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cond, &attr);
    pthread_condattr_destroy(&attr);
    egpu_log(EGPU_LOG_NOTICE, "fake GPUs spec=\"%s\" cards=%zu", spec, f->n);
    *impl = f;
    return 0;
}

static void fake_free(void *impl)
{
    struct fake *f = impl;

    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    egpu_free(f);
}

static int fake_list(void *impl, struct egpu_gpu_info *out, size_t cap, size_t *n,
                     struct egpu_error *err)
{
    struct fake *f = impl;
    int rc = 0;

    pthread_mutex_lock(&f->lock);
    if (f->n > cap) {
        rc = egpu_error_set(err, EGPU_ELIMIT, "fake GPUs: %zu cards, room for %zu", f->n, cap);
    } else {
        memcpy(out, f->cards, f->n * sizeof(*out));
        *n = f->n;
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

static int fake_link(void *impl, uint32_t a, uint32_t b, enum egpu_gpu_link *out,
                     struct egpu_error *err)
{
    struct fake *f = impl;

    if (a >= f->n || b >= f->n)
        return egpu_error_set(err, -ENODEV, "fake GPUs: no card %u (%zu cards)", a >= f->n ? a : b,
                              f->n);
    pthread_mutex_lock(&f->lock);
    *out = (enum egpu_gpu_link)f->links[a][b];
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static int fake_wait(void *impl, long timeout_ms, struct egpu_error *err)
{
    struct fake *f = impl;
    struct timespec deadline;
    int changes;

    (void)err;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&f->lock);
    while (f->changes == 0) {
        if (pthread_cond_timedwait(&f->cond, &f->lock, &deadline) == ETIMEDOUT)
            break;
    }
    changes = (int)f->changes;
    f->changes = 0;
    pthread_mutex_unlock(&f->lock);
    return changes;
}

int egpu__fake_set_health(void *impl, uint32_t index, bool healthy, const char *reason,
                          struct egpu_error *err)
{
    struct fake *f = impl;
    struct egpu_gpu_info *c;

    if (index >= f->n)
        return egpu_error_set(err, -ENODEV, "fake GPUs: no card %u (%zu cards)", index, f->n);
    pthread_mutex_lock(&f->lock);
    c = &f->cards[index];
    if (c->healthy != healthy) {
        f->changes++;
        pthread_cond_broadcast(&f->cond);
    }
    c->healthy = healthy;
    snprintf(c->reason, sizeof(c->reason), "%s",
             healthy ? "" : (reason != NULL ? reason : "set by test"));
    egpu_log(EGPU_LOG_NOTICE, "fake GPU health set index=%u health=%s reason=\"%s\"", index,
             healthy ? EGPU_GPU_HEALTHY : EGPU_GPU_UNHEALTHY, c->reason);
    pthread_mutex_unlock(&f->lock);
    return 0;
}

int egpu__fake_set_link(void *impl, uint32_t a, uint32_t b, enum egpu_gpu_link link,
                        struct egpu_error *err)
{
    struct fake *f = impl;

    if (a >= f->n || b >= f->n)
        return egpu_error_set(err, -ENODEV, "fake GPUs: no card %u (%zu cards)", a >= f->n ? a : b,
                              f->n);
    if ((unsigned)link > EGPU_LINK_UNKNOWN)
        return egpu_error_set(err, -EINVAL, "fake GPUs: no link kind %d", (int)link);
    pthread_mutex_lock(&f->lock);
    f->links[a][b] = (uint8_t)link;
    f->links[b][a] = (uint8_t)link;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Details for the DRA mode's slice attributes                              */

/* What a model's first word (before any '-') says, as NVIDIA documents its
 * products' compute capability (developer.nvidia.com/cuda-gpus). */
static const struct fake_model {
    const char *name;
    const char *arch;
    uint8_t cc_major, cc_minor;
} fake_models[] = {
    {"B200", "Blackwell", 10, 0}, {"B100", "Blackwell", 10, 0}, {"GB200", "Blackwell", 10, 0},
    {"H100", "Hopper", 9, 0},     {"H200", "Hopper", 9, 0},     {"H800", "Hopper", 9, 0},
    {"GH200", "Hopper", 9, 0},    {"L4", "Ada", 8, 9},          {"L40", "Ada", 8, 9},
    {"L40S", "Ada", 8, 9},        {"A100", "Ampere", 8, 0},     {"A800", "Ampere", 8, 0},
    {"A30", "Ampere", 8, 0},      {"A10", "Ampere", 8, 6},      {"A40", "Ampere", 8, 6},
    {"A16", "Ampere", 8, 6},      {"A2", "Ampere", 8, 6},       {"T4", "Turing", 7, 5},
    {"V100", "Volta", 7, 0},      {"P100", "Pascal", 6, 0},     {"P40", "Pascal", 6, 1},
    {"P4", "Pascal", 6, 1},
};

/* Architecture and compute capability from the model's name (none for a
 * model not in the table); PCI bus ID 0000:<0x18 + index>:00.0; NUMA node
 * the card's spec group (the links say SYS, across NUMA nodes, between
 * groups). */
static void fake_details(void *impl, uint32_t index, struct egpu__gpu_details *out)
{
    struct fake *f = impl;
    char word[EGPU_GPU_MODEL_MAX];
    size_t len;

    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n; i++) {
        if (f->cards[i].index != index)
            continue;
        len = strcspn(f->cards[i].model, "-");
        snprintf(word, sizeof(word), "%.*s", (int)len, f->cards[i].model);
        for (size_t m = 0; m < sizeof(fake_models) / sizeof(fake_models[0]); m++) {
            if (strcasecmp(word, fake_models[m].name) != 0)
                continue;
            snprintf(out->architecture, sizeof(out->architecture), "%s", fake_models[m].arch);
            out->cc_major = fake_models[m].cc_major;
            out->cc_minor = fake_models[m].cc_minor;
            break;
        }
        snprintf(out->pci_bus_id, sizeof(out->pci_bus_id), "0000:%02x:00.0",
                 (0x18u + index) & 0xffu);
        out->numa_node = f->group[i];
        break;
    }
    pthread_mutex_unlock(&f->lock);
}

/* A fixed driver, the one the mock NVML reports (tests/mock/nvml_mock.c). */
static void fake_driver(void *impl, struct egpu__gpus_driver *out)
{
    (void)impl;
    snprintf(out->version, sizeof(out->version), "%s", "570.133.20");
    out->cuda_version = 12080;
}

const struct egpu__gpus_ops egpu__fake_ops = {
    .list = fake_list,
    .link = fake_link,
    .wait = fake_wait,
    .free = fake_free,
    .details = fake_details,
    .driver = fake_driver,
};
