/* agent/nvml.c - the NVML backend: the node's real NVIDIA cards.
 *
 * libnvidia-ml.so.1 is loaded with dlopen when the agent starts, never
 * linked, so one agent image runs on every driver version and a node
 * without the driver gets a clear error instead of a loader failure.
 *
 * DESIGN: driver calls go through a checked door. egpu__nvml_load looks up
 * every symbol once (dlsym, dlerror checked) into struct egpu_nvml_api; a
 * missing required symbol fails the load before anything of the library
 * has run, and an optional one (topology, NVLink P2P status, events) stays
 * NULL and is tested before each call, so no NULL pointer is ever called.
 *
 * Health has two sources. Where the driver delivers XID critical-error
 * events, egpu_gpus_wait blocks on an NVML event set and marks the card of a
 * hardware XID unhealthy until the backend is reopened (as NVIDIA's device
 * plugin does; application XIDs are ignored). Every egpu_gpus_list also
 * probes each card (handle, UUID, name, minor, memory info): a card whose
 * probe fails is listed Unhealthy with the failing call, under the identity
 * read before, and recovers when the probe passes again.
 *
 * Used memory comes from nvmlDeviceGetMemoryInfo_v2 where the library has
 * it: nvmlDeviceGetMemoryInfo (v1) counts the driver's and firmware's
 * reservation as used (480 MiB on an idle H100 whose nvidia-smi shows 0),
 * v2 reports it apart. A library without the symbol, or a call answering
 * NVML_ERROR_FUNCTION_NOT_FOUND, NOT_SUPPORTED or ARGUMENT_VERSION_MISMATCH
 * (a driver that does not know this struct version), falls back to v1 on
 * that probe; any other failure of v2 is the probe's failure, as v1's is.
 * The card says which call it came from (egpu_gpu_info.mem_source), and a
 * change of source is logged once.
 *
 * Units: NVML reports memory in bytes; cards carry MiB (bytes >> 20).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "egpu/log.h"
#include "gpus_int.h"
#include "nvml_int.h"

_Static_assert(sizeof(void *) == sizeof(int (*)(void)),
               "dlsym results are stored into function pointers");
_Static_assert(NVML_MEMORY_V2 == 0x02000028u, "nvmlMemory_v2 of nvml.h: 40 bytes | 2 << 24");

/* ------------------------------------------------------------------------ */
/* Loading                                                                  */

struct nvml_sym {
    const char *name;
    size_t offset; /* of the pointer in struct egpu_nvml_api */
    bool required;
};

#define NVML_SYM(field, name, required)                       \
    {                                                         \
        name, offsetof(struct egpu_nvml_api, field), required \
    }

static const struct nvml_sym nvml_syms[] = {
    NVML_SYM(init_v2, "nvmlInit_v2", true),
    NVML_SYM(shutdown, "nvmlShutdown", true),
    NVML_SYM(error_string, "nvmlErrorString", true),
    NVML_SYM(device_get_count_v2, "nvmlDeviceGetCount_v2", true),
    NVML_SYM(device_get_handle_by_index_v2, "nvmlDeviceGetHandleByIndex_v2", true),
    NVML_SYM(device_get_uuid, "nvmlDeviceGetUUID", true),
    NVML_SYM(device_get_name, "nvmlDeviceGetName", true),
    NVML_SYM(device_get_minor_number, "nvmlDeviceGetMinorNumber", true),
    NVML_SYM(device_get_memory_info, "nvmlDeviceGetMemoryInfo", true),
    NVML_SYM(device_get_index, "nvmlDeviceGetIndex", true),
    NVML_SYM(device_get_memory_info_v2, "nvmlDeviceGetMemoryInfo_v2", false),
    NVML_SYM(device_get_utilization_rates, "nvmlDeviceGetUtilizationRates", false),
    NVML_SYM(device_get_topology_common_ancestor, "nvmlDeviceGetTopologyCommonAncestor", false),
    NVML_SYM(device_get_p2p_status, "nvmlDeviceGetP2PStatus", false),
    NVML_SYM(system_get_driver_version, "nvmlSystemGetDriverVersion", false),
    NVML_SYM(system_get_cuda_driver_version_v2, "nvmlSystemGetCudaDriverVersion_v2", false),
    NVML_SYM(device_get_cuda_compute_capability, "nvmlDeviceGetCudaComputeCapability", false),
    NVML_SYM(device_get_architecture, "nvmlDeviceGetArchitecture", false),
    NVML_SYM(device_get_pci_info_v3, "nvmlDeviceGetPciInfo_v3", false),
    NVML_SYM(device_get_numa_node_id, "nvmlDeviceGetNumaNodeId", false),
    NVML_SYM(event_set_create, "nvmlEventSetCreate", false),
    NVML_SYM(device_register_events, "nvmlDeviceRegisterEvents", false),
    NVML_SYM(event_set_wait_v2, "nvmlEventSetWait_v2", false),
    NVML_SYM(event_set_free, "nvmlEventSetFree", false),
};

int egpu__nvml_load(const char *library, void **dl, struct egpu_nvml_api *api,
                    struct egpu_error *err)
{
    const char *lib = library != NULL ? library : EGPU_NVML_LIBRARY;
    struct egpu_nvml_api a;
    const char *why;
    void *h;
    int rc;

    memset(&a, 0, sizeof(a));
    (void)dlerror(); /* clear a stale message */
    h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        why = dlerror();
        return egpu_error_set(err, -ENOENT,
                              "cannot load NVML (%s): %s; is the NVIDIA driver installed on this "
                              "node? On a machine without NVIDIA GPUs run with --fake-gpus "
                              "(or %s), e.g. --fake-gpus 2xA100-80GB",
                              lib, why != NULL ? why : "unknown dlopen error", EGPU_FAKE_GPUS_ENV);
    }
    for (size_t i = 0; i < sizeof(nvml_syms) / sizeof(nvml_syms[0]); i++) {
        const struct nvml_sym *s = &nvml_syms[i];
        void *p;

        (void)dlerror();
        p = dlsym(h, s->name);
        why = dlerror();
        if (p == NULL || why != NULL) {
            if (!s->required) {
                egpu_log(EGPU_LOG_DEBUG, "NVML optional symbol missing lib=%s symbol=%s", lib,
                         s->name);
                continue;
            }
            rc = egpu_error_set(err, -ENOSYS,
                                "NVML (%s) has no %s: the NVIDIA driver is too old for egpu-agent "
                                "(dlsym: %s)",
                                lib, s->name, why != NULL ? why : "NULL symbol");
            dlclose(h);
            return rc;
        }
        memcpy((char *)&a + s->offset, &p, sizeof(p));
    }
    *api = a;
    *dl = h;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */

static int nvml_errno(int r)
{
    switch (r) {
    case NVML_ERROR_INVALID_ARGUMENT:
        return -EINVAL;
    case NVML_ERROR_NOT_SUPPORTED:
        return -ENOTSUP;
    case NVML_ERROR_NO_PERMISSION:
        return -EACCES;
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_GPU_NOT_FOUND:
    case NVML_ERROR_NOT_FOUND:
        return -ENODEV;
    case NVML_ERROR_TIMEOUT:
        return -ETIMEDOUT;
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return -ENOSYS;
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return -EPROTO;
    case NVML_ERROR_MEMORY:
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
        return -ENOMEM;
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return -EOVERFLOW;
    default:
        return -EIO;
    }
}

static const char *nvml_text(const struct egpu_nvml_api *api, int r)
{
    const char *s = api->error_string != NULL ? api->error_string(r) : NULL;

    return s != NULL ? s : "unknown NVML error";
}

/* Record NVML result r of the call described by fmt; returns its code. */
static int nvml_error(const struct egpu_nvml_api *api, int r, struct egpu_error *err,
                      const char *fmt, ...) EGPU_PRINTF(4, 5);

static int nvml_error(const struct egpu_nvml_api *api, int r, struct egpu_error *err,
                      const char *fmt, ...)
{
    char what[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return egpu_error_set(err, nvml_errno(r), "%s: %s (NVML error %d)", what, nvml_text(api, r), r);
}

/* ------------------------------------------------------------------------ */
/* The backend                                                              */

/* What the agent last read of the card at one index. */
struct nvml_card {
    bool known; /* the whole identity below was read at least once */
    char uuid[EGPU_UUID_MAX];
    uint32_t minor;
    char model[EGPU_GPU_MODEL_MAX];
    uint64_t mem_mib;
    uint64_t used_mem_mib;
    uint64_t reserved_mem_mib;
    enum egpu_gpu_mem_source mem_source; /* of used_mem_mib; NONE until read */
    uint32_t util_pct;
    bool has_util;                   /* util_pct was read on the last probe */
    char xid[EGPU_GPU_REASON_MAX];   /* "XID <n>" once a critical XID hit it; sticky */
    char fault[EGPU_GPU_REASON_MAX]; /* the failing probe last seen, to log changes once */
};

struct nvml {
    void *dl;
    struct egpu_nvml_api api;
    pthread_mutex_t lock;           /* guards cards */
    struct nvmlEventSet_st *events; /* NULL: no XID events, probes only; used by wait only */
    struct nvml_card cards[EGPU_NODE_GPUS_MAX];
};

static bool has_events_api(const struct egpu_nvml_api *api)
{
    return api->event_set_create != NULL && api->device_register_events != NULL &&
           api->event_set_wait_v2 != NULL && api->event_set_free != NULL;
}

/* Register every card for XID critical errors. Best effort: without
 * events, health comes from the probes alone. */
static void setup_events(struct nvml *n, unsigned count)
{
    const struct egpu_nvml_api *api = &n->api;
    struct nvmlEventSet_st *set = NULL;
    unsigned registered = 0;
    int r;

    if (!has_events_api(api)) {
        egpu_log(EGPU_LOG_NOTICE, "NVML has no event API: GPU health from probes only");
        return;
    }
    r = api->event_set_create(&set);
    if (r != NVML_SUCCESS) {
        egpu_log(EGPU_LOG_WARN,
                 "NVML event set not created: GPU health from probes only err=\"%s\"",
                 nvml_text(api, r));
        return;
    }
    for (unsigned i = 0; i < count && i < EGPU_NODE_GPUS_MAX; i++) {
        struct nvmlDevice_st *dev = NULL;

        r = api->device_get_handle_by_index_v2(i, &dev);
        if (r == NVML_SUCCESS)
            r = api->device_register_events(dev, nvmlEventTypeXidCriticalError, set);
        if (r == NVML_SUCCESS)
            registered++;
        else
            egpu_log(EGPU_LOG_INFO, "no XID events for GPU index=%u err=\"%s\"", i,
                     nvml_text(api, r));
    }
    if (registered == 0) {
        (void)api->event_set_free(set); /* nothing to wait for; failure leaves nothing to undo */
        return;
    }
    n->events = set;
}

int egpu__nvml_open(const char *library, void **impl, struct egpu_error *err)
{
    const char *lib = library != NULL ? library : EGPU_NVML_LIBRARY;
    struct nvml *n = egpu_calloc(1, sizeof(*n));
    unsigned count = 0;
    int rc, r;

    if (n == NULL)
        return egpu_error_set(err, -ENOMEM, "NVML: out of memory");
    rc = egpu__nvml_load(library, &n->dl, &n->api, err);
    if (rc)
        goto out_free;
    r = n->api.init_v2();
    if (r != NVML_SUCCESS) {
        rc = nvml_error(&n->api, r, err, "nvmlInit_v2 (%s)", lib);
        goto out_close;
    }
    r = n->api.device_get_count_v2(&count);
    if (r != NVML_SUCCESS) {
        rc = nvml_error(&n->api, r, err, "nvmlDeviceGetCount_v2");
        goto out_shutdown;
    }
    pthread_mutex_init(&n->lock, NULL);
    setup_events(n, count);
    egpu_log(EGPU_LOG_NOTICE, "NVML loaded lib=%s cards=%u health=%s", lib, count,
             n->events != NULL ? "xid-events+probes" : "probes");
    *impl = n;
    return 0;

out_shutdown:
    (void)n->api.shutdown(); /* init's failure is the error to report */
out_close:
    dlclose(n->dl);
out_free:
    egpu_free(n);
    return rc;
}

static void nvml_free(void *impl)
{
    struct nvml *n = impl;
    int r;

    if (n->events != NULL)
        (void)n->api.event_set_free(n->events); /* shutdown releases it anyway */
    r = n->api.shutdown();
    if (r != NVML_SUCCESS)
        egpu_log(EGPU_LOG_WARN, "nvmlShutdown failed err=\"%s\"", nvml_text(&n->api, r));
    dlclose(n->dl);
    pthread_mutex_destroy(&n->lock);
    egpu_free(n);
}

/* Does r from nvmlDeviceGetMemoryInfo_v2 mean "ask v1 instead" (the
 * driver lacks the call or this struct version), not a failing card? */
static bool is_v2_unavailable(int r)
{
    return r == NVML_ERROR_FUNCTION_NOT_FOUND || r == NVML_ERROR_NOT_SUPPORTED ||
           r == NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

/* Memory of dev into *total, *used, *reserved (bytes) and *source: v2 where
 * it answers, else v1 (see the file's opening). *call names the call whose
 * failure is returned. Returns an nvmlReturn_t. */
static int read_memory(const struct egpu_nvml_api *api, struct nvmlDevice_st *dev,
                       unsigned long long *total, unsigned long long *used,
                       unsigned long long *reserved, enum egpu_gpu_mem_source *source,
                       const char **call)
{
    struct nvmlMemory_st v1 = {0};
    int r = NVML_ERROR_FUNCTION_NOT_FOUND;

    if (api->device_get_memory_info_v2 != NULL) {
        struct nvmlMemory_v2_st v2 = {.version = NVML_MEMORY_V2};

        *call = "nvmlDeviceGetMemoryInfo_v2";
        r = api->device_get_memory_info_v2(dev, &v2);
        if (r == NVML_SUCCESS) {
            *total = v2.total;
            *used = v2.used;
            *reserved = v2.reserved;
            *source = EGPU_MEM_SOURCE_V2;
            return r;
        }
        if (!is_v2_unavailable(r))
            return r;
    }
    *call = "nvmlDeviceGetMemoryInfo";
    r = api->device_get_memory_info(dev, &v1);
    if (r == NVML_SUCCESS) {
        *total = v1.total;
        *used = v1.used;
        *reserved = 0;
        *source = EGPU_MEM_SOURCE_V1;
    }
    return r;
}

/* Read card i into c (lock held). Never fails: a card that does not answer
 * is reported unhealthy, with the identity known from before if any. */
static void probe_card(struct nvml *n, unsigned i, struct egpu_gpu_info *c)
{
    const struct egpu_nvml_api *api = &n->api;
    struct nvml_card *k = &n->cards[i];
    struct nvmlDevice_st *dev = NULL;
    unsigned long long total = 0, used = 0, reserved = 0;
    enum egpu_gpu_mem_source source = EGPU_MEM_SOURCE_NONE;
    struct nvmlUtilization_st util = {0};
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "", name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "";
    char fault[EGPU_GPU_REASON_MAX] = "";
    const char *call;
    unsigned minor = i;
    int r;

    memset(c, 0, sizeof(*c));
    c->index = i;
    call = "nvmlDeviceGetHandleByIndex_v2";
    r = api->device_get_handle_by_index_v2(i, &dev);
    if (r == NVML_SUCCESS) {
        call = "nvmlDeviceGetUUID";
        r = api->device_get_uuid(dev, uuid, sizeof(uuid));
        uuid[sizeof(uuid) - 1] = '\0';
        if (r == NVML_SUCCESS && (uuid[0] == '\0' || strlen(uuid) >= EGPU_UUID_MAX))
            r = NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (r == NVML_SUCCESS && strcmp(k->uuid, uuid) != 0) {
        /* Another card at this index (or the first look): forget the old one. */
        memset(k, 0, sizeof(*k));
        memcpy(k->uuid, uuid, strlen(uuid) + 1);
    }
    if (r == NVML_SUCCESS) {
        call = "nvmlDeviceGetName";
        r = api->device_get_name(dev, name, sizeof(name));
        name[sizeof(name) - 1] = '\0';
    }
    if (r == NVML_SUCCESS) {
        call = "nvmlDeviceGetMinorNumber";
        r = api->device_get_minor_number(dev, &minor);
        if (r == NVML_ERROR_NOT_SUPPORTED) { /* no /dev/nvidiaN (e.g. WSL): index stands in */
            minor = i;
            r = NVML_SUCCESS;
        }
    }
    if (r == NVML_SUCCESS)
        r = read_memory(api, dev, &total, &used, &reserved, &source, &call);
    if (r == NVML_SUCCESS) {
        snprintf(k->model, sizeof(k->model), "%s", name);
        k->minor = minor;
        k->mem_mib = total >> 20;
        k->used_mem_mib = used >> 20;
        k->reserved_mem_mib = reserved >> 20;
        if (source != k->mem_source)
            egpu_log(k->mem_source == EGPU_MEM_SOURCE_NONE ? EGPU_LOG_INFO : EGPU_LOG_NOTICE,
                     "GPU memory source index=%u uuid=%s source=%s", i, k->uuid,
                     egpu_gpu_mem_source_name(source));
        k->mem_source = source;
        /* Utilization is a measure, not a probe: a card without it stays
         * healthy and reports memory only. */
        k->has_util = api->device_get_utilization_rates != NULL &&
                      api->device_get_utilization_rates(dev, &util) == NVML_SUCCESS &&
                      util.gpu <= 100;
        k->util_pct = k->has_util ? util.gpu : 0;
        k->known = true;
    } else {
        snprintf(fault, sizeof(fault), "%s: %s", call, nvml_text(api, r));
    }
    if (strcmp(fault, k->fault) != 0) {
        if (fault[0] != '\0')
            egpu_log(EGPU_LOG_WARN, "GPU probe failed index=%u uuid=%s err=\"%s\"", i,
                     k->uuid[0] ? k->uuid : "unknown", fault);
        else if (k->fault[0] != '\0')
            egpu_log(EGPU_LOG_NOTICE, "GPU probe passes again index=%u uuid=%s", i, k->uuid);
        memcpy(k->fault, fault, sizeof(fault));
    }
    if (k->known) {
        memcpy(c->uuid, k->uuid, sizeof(c->uuid));
        memcpy(c->model, k->model, sizeof(c->model));
        c->minor = k->minor;
        c->mem_mib = k->mem_mib;
        c->used_mem_mib = k->used_mem_mib;
        c->reserved_mem_mib = k->reserved_mem_mib;
        c->mem_source = k->mem_source;
        c->has_used = true;
        c->util_pct = k->util_pct;
        c->has_util = k->has_util;
    } else {
        c->minor = i;
    }
    c->healthy = fault[0] == '\0' && k->xid[0] == '\0';
    if (fault[0] != '\0')
        memcpy(c->reason, fault, sizeof(c->reason));
    else if (k->xid[0] != '\0')
        memcpy(c->reason, k->xid, sizeof(c->reason));
}

static int nvml_list(void *impl, struct egpu_gpu_info *out, size_t cap, size_t *n_out,
                     struct egpu_error *err)
{
    struct nvml *n = impl;
    unsigned count = 0;
    int r = n->api.device_get_count_v2(&count);

    if (r != NVML_SUCCESS)
        return nvml_error(&n->api, r, err, "nvmlDeviceGetCount_v2");
    if (count > cap || count > EGPU_NODE_GPUS_MAX)
        return egpu_error_set(err, EGPU_ELIMIT, "NVML reports %u GPUs, room for %zu", count,
                              cap < EGPU_NODE_GPUS_MAX ? cap : (size_t)EGPU_NODE_GPUS_MAX);
    pthread_mutex_lock(&n->lock);
    for (unsigned i = 0; i < count; i++)
        probe_card(n, i, &out[i]);
    pthread_mutex_unlock(&n->lock);
    *n_out = count;
    return 0;
}

static int get_handle(struct nvml *n, uint32_t index, struct nvmlDevice_st **dev,
                      struct egpu_error *err)
{
    int r = n->api.device_get_handle_by_index_v2(index, dev);

    if (r == NVML_ERROR_INVALID_ARGUMENT)
        return egpu_error_set(err, -ENODEV, "NVML: no GPU of index %u", index);
    if (r != NVML_SUCCESS)
        return nvml_error(&n->api, r, err, "nvmlDeviceGetHandleByIndex_v2 index %u", index);
    return 0;
}

static enum egpu_gpu_link link_of_level(int level)
{
    switch (level) {
    case NVML_TOPOLOGY_INTERNAL:
        return EGPU_LINK_BOARD;
    case NVML_TOPOLOGY_SINGLE:
        return EGPU_LINK_PIX;
    case NVML_TOPOLOGY_MULTIPLE:
        return EGPU_LINK_PXB;
    case NVML_TOPOLOGY_HOSTBRIDGE:
        return EGPU_LINK_PHB;
    case NVML_TOPOLOGY_NODE:
        return EGPU_LINK_NODE;
    case NVML_TOPOLOGY_SYSTEM:
        return EGPU_LINK_SYS;
    default:
        return EGPU_LINK_UNKNOWN;
    }
}

static int nvml_link(void *impl, uint32_t a, uint32_t b, enum egpu_gpu_link *out,
                     struct egpu_error *err)
{
    struct nvml *n = impl;
    struct nvmlDevice_st *da = NULL, *db = NULL;
    int rc, r, status = -1, level = -1;

    rc = get_handle(n, a, &da, err);
    if (rc == 0)
        rc = get_handle(n, b, &db, err);
    if (rc)
        return rc;
    if (n->api.device_get_p2p_status != NULL) {
        r = n->api.device_get_p2p_status(da, db, NVML_P2P_CAPS_INDEX_NVLINK, &status);
        if (r == NVML_SUCCESS && status == NVML_P2P_STATUS_OK) {
            *out = EGPU_LINK_NVLINK;
            return 0;
        }
    }
    if (n->api.device_get_topology_common_ancestor == NULL) {
        *out = EGPU_LINK_UNKNOWN;
        return 0;
    }
    r = n->api.device_get_topology_common_ancestor(da, db, &level);
    if (r == NVML_ERROR_NOT_SUPPORTED) {
        *out = EGPU_LINK_UNKNOWN;
        return 0;
    }
    if (r != NVML_SUCCESS)
        return nvml_error(&n->api, r, err, "nvmlDeviceGetTopologyCommonAncestor %u %u", a, b);
    *out = link_of_level(level);
    return 0;
}

/* Sleep timeout_ms (>= 0), resuming after signals. */
static void sleep_ms(long timeout_ms)
{
    struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        continue;
}

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* XIDs caused by applications, not the card (NVIDIA device plugin's list):
 * 13 graphics engine exception, 31 memory page fault, 43 GPU stopped
 * processing, 45 preemptive cleanup, 68 video decoder exception, 109
 * context switch timeout. */
static bool is_application_xid(unsigned long long xid)
{
    return xid == 13 || xid == 31 || xid == 43 || xid == 45 || xid == 68 || xid == 109;
}

/* Mark the card(s) of event d unhealthy; returns how many changed. */
static int mark_xid(struct nvml *n, const struct nvmlEventData_st *d)
{
    unsigned first = 0, last = EGPU_NODE_GPUS_MAX, index = 0;
    int changed = 0;

    if (d->device != NULL) {
        int r = n->api.device_get_index(d->device, &index);

        if (r != NVML_SUCCESS || index >= EGPU_NODE_GPUS_MAX) {
            egpu_log(EGPU_LOG_WARN, "XID event for an unknown GPU xid=%llu err=\"%s\"",
                     d->eventData, r != NVML_SUCCESS ? nvml_text(&n->api, r) : "index too large");
            return 0;
        }
        first = index;
        last = index + 1;
    }
    pthread_mutex_lock(&n->lock);
    for (unsigned i = first; i < last; i++) {
        struct nvml_card *k = &n->cards[i];

        if (k->xid[0] != '\0' || (d->device == NULL && !k->known))
            continue;
        snprintf(k->xid, sizeof(k->xid), "XID %llu", d->eventData);
        egpu_log(EGPU_LOG_WARN, "GPU unhealthy index=%u uuid=%s reason=\"%s\"", i,
                 k->uuid[0] ? k->uuid : "unknown", k->xid);
        changed++;
    }
    pthread_mutex_unlock(&n->lock);
    return changed;
}

static int nvml_wait(void *impl, long timeout_ms, struct egpu_error *err)
{
    struct nvml *n = impl;
    long deadline = now_ms() + timeout_ms, left = timeout_ms;

    (void)err;
    if (n->events == NULL) {
        sleep_ms(timeout_ms);
        return 0;
    }
    for (;;) {
        struct nvmlEventData_st d;
        int r, changed;

        memset(&d, 0, sizeof(d));
        r = n->api.event_set_wait_v2(n->events, &d, left > 3600000L ? 3600000U : (unsigned)left);
        if (r == NVML_ERROR_TIMEOUT && now_ms() >= deadline)
            return 0;
        if (r != NVML_SUCCESS && r != NVML_ERROR_TIMEOUT) {
            /* A broken event set would fail at once, forever: fall back to
             * the probes for good rather than spin. */
            egpu_log(EGPU_LOG_WARN,
                     "NVML event wait failed, GPU health from probes only from now on err=\"%s\"",
                     nvml_text(&n->api, r));
            (void)n->api.event_set_free(n->events); /* the set is abandoned either way */
            n->events = NULL;
            left = deadline - now_ms();
            sleep_ms(left > 0 ? left : 0);
            return 0;
        }
        if (r == NVML_SUCCESS && (d.eventType & nvmlEventTypeXidCriticalError) != 0) {
            if (is_application_xid(d.eventData)) {
                egpu_log(EGPU_LOG_INFO, "application XID ignored xid=%llu", d.eventData);
            } else {
                changed = mark_xid(n, &d);
                if (changed > 0)
                    return changed;
            }
        }
        left = deadline - now_ms();
        if (left <= 0)
            return 0;
    }
}

/* ------------------------------------------------------------------------ */
/* Details for the DRA mode's slice attributes                              */

/* NVML's architecture number as its marketing name, or NULL. */
static const char *arch_name(unsigned arch)
{
    static const char *const names[] = {
        [NVML_DEVICE_ARCH_KEPLER] = "Kepler",
        [NVML_DEVICE_ARCH_MAXWELL] = "Maxwell",
        [NVML_DEVICE_ARCH_PASCAL] = "Pascal",
        [NVML_DEVICE_ARCH_VOLTA] = "Volta",
        [NVML_DEVICE_ARCH_TURING] = "Turing",
        [NVML_DEVICE_ARCH_AMPERE] = "Ampere",
        [NVML_DEVICE_ARCH_ADA] = "Ada",
        [NVML_DEVICE_ARCH_HOPPER] = "Hopper",
        [NVML_DEVICE_ARCH_BLACKWELL] = "Blackwell",
    };

    return arch < sizeof(names) / sizeof(names[0]) ? names[arch] : NULL;
}

/* Each call optional and best effort: a missing symbol or a failure
 * leaves its field unknown. */
static void nvml_details(void *impl, uint32_t index, struct egpu__gpu_details *out)
{
    struct nvml *n = impl;
    const struct egpu_nvml_api *api = &n->api;
    struct nvmlDevice_st *dev = NULL;
    struct nvmlPciInfo_st pci;
    unsigned u = 0;
    int major = 0, minor = 0;

    if (get_handle(n, index, &dev, NULL) != 0)
        return;
    if (api->device_get_cuda_compute_capability != NULL &&
        api->device_get_cuda_compute_capability(dev, &major, &minor) == NVML_SUCCESS && major > 0 &&
        minor >= 0) {
        out->cc_major = (uint32_t)major;
        out->cc_minor = (uint32_t)minor;
    }
    if (api->device_get_architecture != NULL &&
        api->device_get_architecture(dev, &u) == NVML_SUCCESS && arch_name(u) != NULL)
        snprintf(out->architecture, sizeof(out->architecture), "%s", arch_name(u));
    memset(&pci, 0, sizeof(pci));
    if (api->device_get_pci_info_v3 != NULL &&
        api->device_get_pci_info_v3(dev, &pci) == NVML_SUCCESS && pci.domain <= 0xffff &&
        pci.bus <= 0xff && pci.device <= 0x1f) {
        /* The function is the busId's last digit ("...:18:00.0"). */
        size_t len = strnlen(pci.busId, sizeof(pci.busId));
        unsigned fn = len >= 2 && pci.busId[len - 2] == '.' && pci.busId[len - 1] >= '0' &&
                              pci.busId[len - 1] <= '7'
                          ? (unsigned)(pci.busId[len - 1] - '0')
                          : 0;

        snprintf(out->pci_bus_id, sizeof(out->pci_bus_id), "%04x:%02x:%02x.%u", pci.domain, pci.bus,
                 pci.device, fn);
    }
    if (api->device_get_numa_node_id != NULL &&
        api->device_get_numa_node_id(dev, &u) == NVML_SUCCESS && u <= 1023)
        out->numa_node = (int)u;
}

static void nvml_driver(void *impl, struct egpu__gpus_driver *out)
{
    struct nvml *n = impl;
    const struct egpu_nvml_api *api = &n->api;
    char v[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int cuda = 0;

    if (api->system_get_driver_version != NULL &&
        api->system_get_driver_version(v, sizeof(v)) == NVML_SUCCESS) {
        v[sizeof(v) - 1] = '\0';
        snprintf(out->version, sizeof(out->version), "%s", v);
    }
    if (api->system_get_cuda_driver_version_v2 != NULL &&
        api->system_get_cuda_driver_version_v2(&cuda) == NVML_SUCCESS && cuda > 0)
        out->cuda_version = (uint32_t)cuda;
}

const struct egpu__gpus_ops egpu__nvml_ops = {
    .list = nvml_list,
    .link = nvml_link,
    .wait = nvml_wait,
    .free = nvml_free,
    .details = nvml_details,
    .driver = nvml_driver,
};
