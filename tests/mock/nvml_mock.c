/* tests/mock/nvml_mock.c - a mock libnvidia-ml.so.1 for the agent's tests.
 *
 * Built by src/agent/CMakeLists.txt as
 * <build>/src/agent/nvml-mock[-variant]/libnvidia-ml.so.1 (three variants: complete;
 * -DNVML_MOCK_NO_MINOR lacks the required nvmlDeviceGetMinorNumber; -DNVML_MOCK_NO_OPTIONAL lacks
 * nvmlDeviceGetMemoryInfo_v2, topology, P2P and event calls, as an older driver), so the NVML
 * backend runs its real dlopen/dlsym path without a GPU. The simulated machine is read from the
 * environment at each nvmlInit_v2:
 *
 *   EGPU_MOCK_NVML_GPUS    "name:MiB[:uuid],..." (default: two A100 80GB);
 *                          minor numbers are given in reverse (count-1-index)
 *   EGPU_MOCK_NVML_INIT    an NVML return code for nvmlInit_v2 (e.g. 9)
 *   EGPU_MOCK_NVML_FAIL    "call@index=code,..." (index '*' = any) makes
 *                          that call fail, e.g. nvmlDeviceGetMemoryInfo@1=15;
 *                          read at every call, so a card can break after it was listed
 *   EGPU_MOCK_NVML_TOPO    "a-b=level,..." common ancestors (default 30, host bridge)
 *   EGPU_MOCK_NVML_NVLINK  "a-b,..." pairs with NVLink
 *   EGPU_MOCK_NVML_XID     "index:xid,..." events delivered in order by
 *                          nvmlEventSetWait_v2 (index '*': device NULL)
 *   EGPU_MOCK_NVML_NO_EVENTS  "1": nvmlDeviceRegisterEvents is not supported
 *   EGPU_MOCK_NVML_RESERVED_MIB  what the driver and firmware set aside on each
 *                          card, MiB (default 0; read at each call): as a real
 *                          driver's, nvmlDeviceGetMemoryInfo counts it in used,
 *                          nvmlDeviceGetMemoryInfo_v2 reports it as reserved and
 *                          leaves it out of used (total = reserved + free + used)
 *
 * The optional details (not in the -DNVML_MOCK_NO_OPTIONAL variant): driver
 * "570.133.20", CUDA 12080 (12.8), and per card compute capability 8.0,
 * architecture Ampere, PCI bus ID 00000000:<0x18 + index>:00.0 and NUMA node
 * index % 2; each call can be made to fail with EGPU_MOCK_NVML_FAIL (the
 * system calls with index '*').
 *   EGPU_MOCK_CUDA_STATE   the mock CUDA driver's state file (tests/mock/mock_device.h);
 *                          read at each call
 *
 * Memory and utilisation: without EGPU_MOCK_CUDA_STATE, nvmlDeviceGetMemoryInfo
 * (and _v2) report 1/16 of each card as used and nvmlDeviceGetUtilizationRates
 * 0%. With it, used is the card's simulated device memory in use (every process
 * of the mock libcuda.so.1 on that state, dead processes reclaimed first) and
 * the GPU utilisation the card's busy fraction over the last second, from the
 * shared device timeline (memory utilisation stays 0). The total always comes
 * from EGPU_MOCK_NVML_GPUS.
 *
 * Also built as <build>/tests/mock/cuda/libnvidia-ml.so.1 (complete), beside
 * the mock libcuda.so.1, by tests/mock/CMakeLists.txt.
 *
 * egpu_mock_nvml_stats reports init/shutdown calls and live event sets, so
 * tests can check the backend releases what it took. Test code, never shipped.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "egpu/core.h"
#include "mock_device.h"
#include "nvml_int.h"

/* NVML_ERROR_ARGUMENT_VERSION_MISMATCH: a struct's version field is not one
 * this library knows (NVML API reference). */
#define MOCK_NVML_VERSION_MISMATCH NVML_ERROR_ARGUMENT_VERSION_MISMATCH

#define MOCK_GPUS_MAX  16
#define MOCK_RULES_MAX 32

struct nvmlDevice_st {
    unsigned index;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    unsigned long long mem_mib;
};

struct nvmlEventSet_st {
    int live;
    unsigned registered; /* bit per device index */
};

struct fail_rule {
    char call[64];
    int index; /* -1 = any */
    int code;
};

struct pair_rule {
    unsigned a, b;
    int value;
};

struct xid_event {
    int index; /* -1 = every device */
    unsigned long long xid;
};

static struct {
    int inits; /* nvmlInit_v2 successes (reference count of NVML) */
    int init_calls, shutdown_calls, sets_live;
    unsigned ngpus;
    struct nvmlDevice_st gpus[MOCK_GPUS_MAX];
    unsigned nfail, ntopo, nnvlink, nxid, next_xid;
    struct fail_rule fail[MOCK_RULES_MAX];
    struct pair_rule topo[MOCK_RULES_MAX], nvlink[MOCK_RULES_MAX];
    struct xid_event xid[MOCK_RULES_MAX];
    struct nvmlEventSet_st sets[4];
    int no_events;
} mock;

/* The CUDA mock's shared state, opened on first use (see the header). */
static struct {
    pthread_mutex_t lock;
    struct egpu_mock_dev dev;
    char path[4096];
} shared = {.lock = PTHREAD_MUTEX_INITIALIZER};

void egpu_mock_nvml_stats(int *init_calls, int *shutdown_calls, int *sets_live);

void egpu_mock_nvml_stats(int *init_calls, int *shutdown_calls, int *sets_live)
{
    *init_calls = mock.init_calls;
    *shutdown_calls = mock.shutdown_calls;
    *sets_live = mock.sets_live;
}

static long num(const char *s)
{
    return strtol(s, NULL, 10);
}

/* The cards, parsed as the mock CUDA driver parses them (mock_device.c). */
static void load_gpus(void)
{
    struct egpu_mock_gpu gpus[MOCK_GPUS_MAX];

    mock.ngpus = egpu_mock_gpus_load(gpus, MOCK_GPUS_MAX);
    for (unsigned i = 0; i < mock.ngpus; i++) {
        struct nvmlDevice_st *d = &mock.gpus[i];

        memset(d, 0, sizeof(*d));
        d->index = i;
        memcpy(d->name, gpus[i].name, sizeof(d->name));
        memcpy(d->uuid, gpus[i].uuid, sizeof(d->uuid));
        d->mem_mib = gpus[i].mem_mib;
    }
}

static void load_fail(void)
{
    const char *p = getenv("EGPU_MOCK_NVML_FAIL");
    char field[64];

    mock.nfail = 0;
    while (p != NULL && *p != '\0' && mock.nfail < MOCK_RULES_MAX) {
        struct fail_rule *r = &mock.fail[mock.nfail++];

        egpu_mock_next_field(&p, "@", r->call, sizeof(r->call));
        egpu_mock_next_field(&p, "=", field, sizeof(field));
        r->index = field[0] == '*' ? -1 : (int)num(field);
        egpu_mock_next_field(&p, ",", field, sizeof(field));
        r->code = (int)num(field);
    }
}

static unsigned load_pairs(const char *var, struct pair_rule *rules, int dflt)
{
    const char *p = getenv(var);
    char field[32];
    unsigned n = 0;

    while (p != NULL && *p != '\0' && n < MOCK_RULES_MAX) {
        struct pair_rule *r = &rules[n++];
        char sep;

        egpu_mock_next_field(&p, "-", field, sizeof(field));
        r->a = (unsigned)num(field);
        sep = egpu_mock_next_field(&p, "=,", field, sizeof(field));
        r->b = (unsigned)num(field);
        r->value = dflt;
        if (sep == '=') {
            egpu_mock_next_field(&p, ",", field, sizeof(field));
            r->value = (int)num(field);
        }
    }
    return n;
}

static void load_xid(void)
{
    const char *p = getenv("EGPU_MOCK_NVML_XID");
    char field[32];

    mock.nxid = mock.next_xid = 0;
    while (p != NULL && *p != '\0' && mock.nxid < MOCK_RULES_MAX) {
        struct xid_event *e = &mock.xid[mock.nxid++];

        egpu_mock_next_field(&p, ":", field, sizeof(field));
        e->index = field[0] == '*' ? -1 : (int)num(field);
        egpu_mock_next_field(&p, ",", field, sizeof(field));
        e->xid = (unsigned long long)num(field);
    }
}

/* The code a FAIL rule sets for call on device index (-1: no device), or 0. */
static int failure(const char *call, int index)
{
    load_fail();
    for (unsigned i = 0; i < mock.nfail; i++) {
        if (strcmp(mock.fail[i].call, call) == 0 &&
            (mock.fail[i].index < 0 || mock.fail[i].index == index))
            return mock.fail[i].code;
    }
    return NVML_SUCCESS;
}

static bool valid_device(const struct nvmlDevice_st *d)
{
    return d != NULL && d >= mock.gpus && d < mock.gpus + mock.ngpus;
}

/* The common checks of a device call: initialised, a real handle, no FAIL rule. */
static int device_call(const char *call, const struct nvmlDevice_st *d)
{
    if (mock.inits == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!valid_device(d))
        return NVML_ERROR_INVALID_ARGUMENT;
    return failure(call, (int)d->index);
}

static int copy_text(const char *s, char *out, unsigned len)
{
    if (out == NULL || strlen(s) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

int nvmlInit_v2(void)
{
    const char *init = getenv("EGPU_MOCK_NVML_INIT");
    const char *no_events = getenv("EGPU_MOCK_NVML_NO_EVENTS");

    mock.init_calls++;
    if (init != NULL && num(init) != 0)
        return (int)num(init);
    if (mock.inits++ > 0)
        return NVML_SUCCESS;
    load_gpus();
    mock.ntopo = load_pairs("EGPU_MOCK_NVML_TOPO", mock.topo, NVML_TOPOLOGY_HOSTBRIDGE);
    mock.nnvlink = load_pairs("EGPU_MOCK_NVML_NVLINK", mock.nvlink, 1);
    load_xid();
    mock.no_events = no_events != NULL && no_events[0] == '1';
    return NVML_SUCCESS;
}

int nvmlShutdown(void)
{
    mock.shutdown_calls++;
    if (mock.inits == 0)
        return NVML_ERROR_UNINITIALIZED;
    mock.inits--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(int result)
{
    switch (result) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
        return "Insufficient Permissions";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
        return "Timeout";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "RM has detected an NVML/RM version mismatch.";
    default:
        return "Unknown Error";
    }
}

int nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    int r;

    if (mock.inits == 0)
        return NVML_ERROR_UNINITIALIZED;
    r = failure("nvmlDeviceGetCount_v2", -1);
    if (r == NVML_SUCCESS)
        *deviceCount = mock.ngpus;
    return r;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, struct nvmlDevice_st **device)
{
    int r;

    if (mock.inits == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= mock.ngpus || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = failure("nvmlDeviceGetHandleByIndex_v2", (int)index);
    if (r == NVML_SUCCESS)
        *device = &mock.gpus[index];
    return r;
}

int nvmlDeviceGetUUID(struct nvmlDevice_st *device, char *uuid, unsigned int length)
{
    int r = device_call("nvmlDeviceGetUUID", device);

    return r != NVML_SUCCESS ? r : copy_text(device->uuid, uuid, length);
}

int nvmlDeviceGetName(struct nvmlDevice_st *device, char *name, unsigned int length)
{
    int r = device_call("nvmlDeviceGetName", device);

    return r != NVML_SUCCESS ? r : copy_text(device->name, name, length);
}

#ifndef NVML_MOCK_NO_MINOR
int nvmlDeviceGetMinorNumber(struct nvmlDevice_st *device, unsigned int *minorNumber)
{
    int r = device_call("nvmlDeviceGetMinorNumber", device);

    if (r == NVML_SUCCESS)
        *minorNumber = mock.ngpus - 1 - device->index;
    return r;
}
#endif /* NVML_MOCK_NO_MINOR */

/* Locked (shared.lock): the state of EGPU_MOCK_CUDA_STATE, opened (or
 * reopened when the variable changed); NULL when unset or unusable. */
static struct egpu_mock_dev *shared_state(void)
{
    const char *path = getenv("EGPU_MOCK_CUDA_STATE");

    if (path == NULL || *path == '\0' || strlen(path) >= sizeof(shared.path))
        return NULL;
    if (shared.dev.st != NULL && strcmp(shared.path, path) != 0)
        egpu_mock_dev_close(&shared.dev);
    if (shared.dev.st == NULL) {
        if (egpu_mock_dev_open(&shared.dev, path, true, false) != 0)
            return NULL;
        memcpy(shared.path, path, strlen(path) + 1);
    }
    return &shared.dev;
}

/* The driver's reservation on a card of total bytes, bytes
 * (EGPU_MOCK_NVML_RESERVED_MIB, at most the total). */
static unsigned long long reserved_of(unsigned long long total)
{
    const char *v = getenv("EGPU_MOCK_NVML_RESERVED_MIB");
    unsigned long long r = v != NULL ? strtoull(v, NULL, 10) << 20 : 0;

    return r < total ? r : total;
}

/* Memory of card index in bytes: total from EGPU_MOCK_NVML_GPUS, used by
 * processes from the shared state or 1/16 of the total without one, at most
 * the total less the reservation. NVML_ERROR_UNKNOWN when the state is named
 * but cannot be read. */
static int memory_of(const struct nvmlDevice_st *device, unsigned long long *total,
                     unsigned long long *used)
{
    const char *path = getenv("EGPU_MOCK_CUDA_STATE");
    unsigned long long room;
    struct egpu_mock_dev *dev;
    int r = NVML_SUCCESS;

    *total = device->mem_mib << 20;
    room = *total - reserved_of(*total);
    *used = *total / 16 < room ? *total / 16 : room;
    if (path == NULL || *path == '\0')
        return NVML_SUCCESS;
    pthread_mutex_lock(&shared.lock);
    dev = shared_state();
    if (dev == NULL || egpu_mock_lock(dev) != 0) {
        r = NVML_ERROR_UNKNOWN;
    } else {
        egpu_mock_reclaim(dev);
        *used = device->index < dev->st->ncards ? dev->st->cards[device->index].used_bytes : 0;
        egpu_mock_unlock(dev);
        if (*used > room)
            *used = room;
    }
    pthread_mutex_unlock(&shared.lock);
    return r;
}

int nvmlDeviceGetMemoryInfo(struct nvmlDevice_st *device, struct nvmlMemory_st *memory)
{
    unsigned long long total, used;
    int r = device_call("nvmlDeviceGetMemoryInfo", device);

    if (r == NVML_SUCCESS && memory == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = memory_of(device, &total, &used);
    if (r == NVML_SUCCESS) {
        memory->total = total;
        memory->used = used + reserved_of(total);
        memory->free = total - memory->used;
    }
    return r;
}

#ifndef NVML_MOCK_NO_OPTIONAL
int nvmlDeviceGetMemoryInfo_v2(struct nvmlDevice_st *device, struct nvmlMemory_v2_st *memory)
{
    unsigned long long total, used;
    int r = device_call("nvmlDeviceGetMemoryInfo_v2", device);

    if (r == NVML_SUCCESS && memory == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && memory->version != NVML_MEMORY_V2)
        r = MOCK_NVML_VERSION_MISMATCH;
    if (r == NVML_SUCCESS)
        r = memory_of(device, &total, &used);
    if (r == NVML_SUCCESS) {
        memory->total = total;
        memory->reserved = reserved_of(total);
        memory->used = used;
        memory->free = total - memory->reserved - used;
    }
    return r;
}
#endif /* NVML_MOCK_NO_OPTIONAL */

int nvmlDeviceGetUtilizationRates(struct nvmlDevice_st *device,
                                  struct nvmlUtilization_st *utilization)
{
    const char *path = getenv("EGPU_MOCK_CUDA_STATE");
    struct egpu_mock_card_stats stats;
    struct egpu_mock_dev *dev;
    int r = device_call("nvmlDeviceGetUtilizationRates", device);

    if (r == NVML_SUCCESS && utilization == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        return r;
    utilization->gpu = 0;
    utilization->memory = 0;
    if (path == NULL || *path == '\0')
        return NVML_SUCCESS;
    pthread_mutex_lock(&shared.lock);
    dev = shared_state();
    if (dev == NULL || egpu_mock_lock(dev) != 0) {
        r = NVML_ERROR_UNKNOWN;
    } else {
        if (device->index < dev->st->ncards) {
            egpu_mock_card_read(dev, device->index, egpu_mock_now_ns(), &stats);
            utilization->gpu = stats.util_pct;
        }
        egpu_mock_unlock(dev);
    }
    pthread_mutex_unlock(&shared.lock);
    return r;
}

int nvmlDeviceGetIndex(struct nvmlDevice_st *device, unsigned int *index)
{
    int r = device_call("nvmlDeviceGetIndex", device);

    if (r == NVML_SUCCESS)
        *index = device->index;
    return r;
}

#ifndef NVML_MOCK_NO_OPTIONAL
static int pair_value(const struct pair_rule *rules, unsigned n, unsigned a, unsigned b, int dflt)
{
    for (unsigned i = 0; i < n; i++) {
        if ((rules[i].a == a && rules[i].b == b) || (rules[i].a == b && rules[i].b == a))
            return rules[i].value;
    }
    return dflt;
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    int r = mock.inits == 0 ? NVML_ERROR_UNINITIALIZED : failure("nvmlSystemGetDriverVersion", -1);

    return r != NVML_SUCCESS ? r : copy_text("570.133.20", version, length);
}

int nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    int r = mock.inits == 0 ? NVML_ERROR_UNINITIALIZED
                            : failure("nvmlSystemGetCudaDriverVersion_v2", -1);

    if (r == NVML_SUCCESS)
        *cudaDriverVersion = 12080;
    return r;
}

int nvmlDeviceGetCudaComputeCapability(struct nvmlDevice_st *device, int *major, int *minor)
{
    int r = device_call("nvmlDeviceGetCudaComputeCapability", device);

    if (r == NVML_SUCCESS) {
        *major = 8;
        *minor = 0;
    }
    return r;
}

int nvmlDeviceGetArchitecture(struct nvmlDevice_st *device, unsigned int *arch)
{
    int r = device_call("nvmlDeviceGetArchitecture", device);

    if (r == NVML_SUCCESS)
        *arch = NVML_DEVICE_ARCH_AMPERE;
    return r;
}

int nvmlDeviceGetPciInfo_v3(struct nvmlDevice_st *device, struct nvmlPciInfo_st *pci)
{
    int r = device_call("nvmlDeviceGetPciInfo_v3", device);

    if (r == NVML_SUCCESS) {
        memset(pci, 0, sizeof(*pci));
        pci->bus = 0x18 + device->index;
        snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", pci->bus);
        snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", pci->bus);
        pci->pciDeviceId = 0x20b510de;
    }
    return r;
}

int nvmlDeviceGetNumaNodeId(struct nvmlDevice_st *device, unsigned int *node)
{
    int r = device_call("nvmlDeviceGetNumaNodeId", device);

    if (r == NVML_SUCCESS)
        *node = device->index % 2;
    return r;
}

int nvmlDeviceGetTopologyCommonAncestor(struct nvmlDevice_st *device1,
                                        struct nvmlDevice_st *device2, int *pathInfo)
{
    int r = device_call("nvmlDeviceGetTopologyCommonAncestor", device1);

    if (r == NVML_SUCCESS && !valid_device(device2))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *pathInfo = pair_value(mock.topo, mock.ntopo, device1->index, device2->index,
                               NVML_TOPOLOGY_HOSTBRIDGE);
    return r;
}

int nvmlDeviceGetP2PStatus(struct nvmlDevice_st *device1, struct nvmlDevice_st *device2,
                           int p2pIndex, int *p2pStatus)
{
    int r = device_call("nvmlDeviceGetP2PStatus", device1);

    if (r == NVML_SUCCESS && !valid_device(device2))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && p2pIndex != NVML_P2P_CAPS_INDEX_NVLINK)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS)
        *p2pStatus = pair_value(mock.nvlink, mock.nnvlink, device1->index, device2->index, 0)
                         ? NVML_P2P_STATUS_OK
                         : 5; /* NVML_P2P_STATUS_NOT_SUPPORTED */
    return r;
}

int nvmlEventSetCreate(struct nvmlEventSet_st **set)
{
    if (mock.inits == 0)
        return NVML_ERROR_UNINITIALIZED;
    for (size_t i = 0; i < sizeof(mock.sets) / sizeof(mock.sets[0]); i++) {
        if (!mock.sets[i].live) {
            mock.sets[i] = (struct nvmlEventSet_st){.live = 1};
            mock.sets_live++;
            *set = &mock.sets[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_MEMORY;
}

int nvmlDeviceRegisterEvents(struct nvmlDevice_st *device, unsigned long long eventTypes,
                             struct nvmlEventSet_st *set)
{
    int r = device_call("nvmlDeviceRegisterEvents", device);

    if (r == NVML_SUCCESS && (set == NULL || !set->live))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (mock.no_events || eventTypes != nvmlEventTypeXidCriticalError))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS)
        set->registered |= 1u << device->index;
    return r;
}

int nvmlEventSetWait_v2(struct nvmlEventSet_st *set, struct nvmlEventData_st *data,
                        unsigned int timeoutms)
{
    struct timespec ts = {timeoutms / 1000, (long)(timeoutms % 1000) * 1000000L};
    int r;

    if (mock.inits == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL || !set->live || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = failure("nvmlEventSetWait_v2", -1);
    if (r != NVML_SUCCESS)
        return r;
    if (mock.next_xid < mock.nxid) {
        const struct xid_event *e = &mock.xid[mock.next_xid++];

        memset(data, 0, sizeof(*data));
        data->device =
            e->index >= 0 && (unsigned)e->index < mock.ngpus ? &mock.gpus[e->index] : NULL;
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = e->xid;
        data->gpuInstanceId = 0xffffffffu;
        data->computeInstanceId = 0xffffffffu;
        return NVML_SUCCESS;
    }
    nanosleep(&ts, NULL);
    return NVML_ERROR_TIMEOUT;
}

int nvmlEventSetFree(struct nvmlEventSet_st *set)
{
    if (mock.inits == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL || !set->live)
        return NVML_ERROR_INVALID_ARGUMENT;
    set->live = 0;
    mock.sets_live--;
    return NVML_SUCCESS;
}
#endif /* NVML_MOCK_NO_OPTIONAL */
