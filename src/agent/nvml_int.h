/* agent/nvml_int.h - the part of NVML egpu-agent uses, declared by the project.
 *
 * NVIDIA's nvml.h is not needed to build: these declarations follow its
 * public semantics (names, values, layouts and signatures of the NVML API
 * reference) for the few calls the agent makes. Types keep NVML's struct
 * tags but are not typedef'd (house style): nvmlDevice_t is written
 * `struct nvmlDevice_st *`, nvmlReturn_t and the enums `int` (an enum is an
 * int in the C ABI NVML is built with).
 *
 * The agent never calls these by name: src/agent/nvml.c looks each one up
 * with dlsym in the library it loaded and calls it through struct
 * egpu_nvml_api, a missing one being an error rather than a NULL call. The
 * prototypes are here for the mock library (tests/mock/nvml_mock.c), which
 * defines them, and to document the signatures the table must match.
 */
#ifndef EGPU_NVML_INT_H
#define EGPU_NVML_INT_H

#include <stdbool.h>
#include <stddef.h>

/* nvmlReturn_t */
#define NVML_SUCCESS                         0
#define NVML_ERROR_UNINITIALIZED             1
#define NVML_ERROR_INVALID_ARGUMENT          2
#define NVML_ERROR_NOT_SUPPORTED             3
#define NVML_ERROR_NO_PERMISSION             4
#define NVML_ERROR_ALREADY_INITIALIZED       5
#define NVML_ERROR_NOT_FOUND                 6
#define NVML_ERROR_INSUFFICIENT_SIZE         7
#define NVML_ERROR_INSUFFICIENT_POWER        8
#define NVML_ERROR_DRIVER_NOT_LOADED         9
#define NVML_ERROR_TIMEOUT                   10
#define NVML_ERROR_IRQ_ISSUE                 11
#define NVML_ERROR_LIBRARY_NOT_FOUND         12
#define NVML_ERROR_FUNCTION_NOT_FOUND        13
#define NVML_ERROR_CORRUPTED_INFOROM         14
#define NVML_ERROR_GPU_IS_LOST               15
#define NVML_ERROR_RESET_REQUIRED            16
#define NVML_ERROR_OPERATING_SYSTEM          17
#define NVML_ERROR_LIB_RM_VERSION_MISMATCH   18
#define NVML_ERROR_IN_USE                    19
#define NVML_ERROR_MEMORY                    20
#define NVML_ERROR_NO_DATA                   21
#define NVML_ERROR_INSUFFICIENT_RESOURCES    23
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25 /* a struct's version word is not one it knows */
#define NVML_ERROR_GPU_NOT_FOUND             28
#define NVML_ERROR_UNKNOWN                   999

/* Buffer sizes for nvmlDeviceGetUUID and nvmlDeviceGetName, bytes. */
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96

/* Buffer sizes for nvmlSystemGetDriverVersion and nvmlPciInfo_t, bytes. */
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE     32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE  16

/* nvmlDeviceArchitecture_t (unsigned int) */
#define NVML_DEVICE_ARCH_KEPLER    2
#define NVML_DEVICE_ARCH_MAXWELL   3
#define NVML_DEVICE_ARCH_PASCAL    4
#define NVML_DEVICE_ARCH_VOLTA     5
#define NVML_DEVICE_ARCH_TURING    6
#define NVML_DEVICE_ARCH_AMPERE    7
#define NVML_DEVICE_ARCH_ADA       8
#define NVML_DEVICE_ARCH_HOPPER    9
#define NVML_DEVICE_ARCH_BLACKWELL 10

/* nvmlGpuTopologyLevel_t */
#define NVML_TOPOLOGY_INTERNAL   0  /* the same board, e.g. Tesla K80 */
#define NVML_TOPOLOGY_SINGLE     10 /* one PCIe switch */
#define NVML_TOPOLOGY_MULTIPLE   20 /* several switches, no host bridge */
#define NVML_TOPOLOGY_HOSTBRIDGE 30 /* the same host bridge */
#define NVML_TOPOLOGY_NODE       40 /* the same NUMA node */
#define NVML_TOPOLOGY_SYSTEM     50 /* anywhere in the system */

/* nvmlGpuP2PCapsIndex_t and nvmlGpuP2PStatus_t (the values used) */
#define NVML_P2P_CAPS_INDEX_NVLINK 2
#define NVML_P2P_STATUS_OK         0

/* Event types (unsigned long long bit mask) */
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL

struct nvmlDevice_st;   /* opaque: nvmlDevice_t is a pointer to it */
struct nvmlEventSet_st; /* opaque: nvmlEventSet_t */

/* nvmlMemory_t: bytes. */
struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
};

/* nvmlMemory_v2_t: bytes. Unlike nvmlMemory_t, used leaves out what the
 * driver and firmware set aside (reserved): total = reserved + free + used.
 * version must be NVML_MEMORY_V2 before the call. */
struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
};

/* nvml.h's nvmlMemory_v2, NVML_STRUCT_VERSION(Memory, 2): the struct's size
 * with the version number in the top byte. */
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(struct nvmlMemory_v2_st) | (2u << 24)))

/* nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 fills it. */
struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId; /* device id << 16 | vendor id */
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* "00000000:18:00.0" */
};

/* nvmlUtilization_t: percent of the last sample period. */
struct nvmlUtilization_st {
    unsigned int gpu;    /* time a kernel ran */
    unsigned int memory; /* time device memory was read or written */
};

/* nvmlEventData_t as nvmlEventSetWait_v2 fills it. */
struct nvmlEventData_st {
    struct nvmlDevice_st *device; /* NULL: the event concerns every device */
    unsigned long long eventType;
    unsigned long long eventData; /* the XID for nvmlEventTypeXidCriticalError (999 unknown) */
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
};

int nvmlInit_v2(void);
int nvmlShutdown(void);
const char *nvmlErrorString(int result);
int nvmlDeviceGetCount_v2(unsigned int *deviceCount);
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, struct nvmlDevice_st **device);
int nvmlDeviceGetUUID(struct nvmlDevice_st *device, char *uuid, unsigned int length);
int nvmlDeviceGetName(struct nvmlDevice_st *device, char *name, unsigned int length);
int nvmlDeviceGetMinorNumber(struct nvmlDevice_st *device, unsigned int *minorNumber);
int nvmlDeviceGetMemoryInfo(struct nvmlDevice_st *device, struct nvmlMemory_st *memory);
int nvmlDeviceGetMemoryInfo_v2(struct nvmlDevice_st *device, struct nvmlMemory_v2_st *memory);
int nvmlDeviceGetUtilizationRates(struct nvmlDevice_st *device,
                                  struct nvmlUtilization_st *utilization);
int nvmlDeviceGetIndex(struct nvmlDevice_st *device, unsigned int *index);
int nvmlDeviceGetTopologyCommonAncestor(struct nvmlDevice_st *device1,
                                        struct nvmlDevice_st *device2, int *pathInfo);
int nvmlDeviceGetP2PStatus(struct nvmlDevice_st *device1, struct nvmlDevice_st *device2,
                           int p2pIndex, int *p2pStatus);
int nvmlSystemGetDriverVersion(char *version, unsigned int length);
int nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion);
int nvmlDeviceGetCudaComputeCapability(struct nvmlDevice_st *device, int *major, int *minor);
int nvmlDeviceGetArchitecture(struct nvmlDevice_st *device, unsigned int *arch);
int nvmlDeviceGetPciInfo_v3(struct nvmlDevice_st *device, struct nvmlPciInfo_st *pci);
int nvmlDeviceGetNumaNodeId(struct nvmlDevice_st *device, unsigned int *node);
int nvmlEventSetCreate(struct nvmlEventSet_st **set);
int nvmlDeviceRegisterEvents(struct nvmlDevice_st *device, unsigned long long eventTypes,
                             struct nvmlEventSet_st *set);
int nvmlEventSetWait_v2(struct nvmlEventSet_st *set, struct nvmlEventData_st *data,
                        unsigned int timeoutms);
int nvmlEventSetFree(struct nvmlEventSet_st *set);

/* The calls as loaded. Required ones are never NULL once egpu__nvml_load
 * succeeded; optional ones (memory info v2, utilization, topology, NVLink,
 * events) may be NULL and are checked before every call. */
struct egpu_nvml_api {
    int (*init_v2)(void);
    int (*shutdown)(void);
    const char *(*error_string)(int result);
    int (*device_get_count_v2)(unsigned int *count);
    int (*device_get_handle_by_index_v2)(unsigned int index, struct nvmlDevice_st **device);
    int (*device_get_uuid)(struct nvmlDevice_st *device, char *uuid, unsigned int length);
    int (*device_get_name)(struct nvmlDevice_st *device, char *name, unsigned int length);
    int (*device_get_minor_number)(struct nvmlDevice_st *device, unsigned int *minor);
    int (*device_get_memory_info)(struct nvmlDevice_st *device, struct nvmlMemory_st *memory);
    int (*device_get_index)(struct nvmlDevice_st *device, unsigned int *index);
    /* optional */
    int (*device_get_memory_info_v2)(struct nvmlDevice_st *device, struct nvmlMemory_v2_st *memory);
    int (*device_get_utilization_rates)(struct nvmlDevice_st *device,
                                        struct nvmlUtilization_st *utilization);
    int (*device_get_topology_common_ancestor)(struct nvmlDevice_st *a, struct nvmlDevice_st *b,
                                               int *level);
    int (*device_get_p2p_status)(struct nvmlDevice_st *a, struct nvmlDevice_st *b, int caps,
                                 int *status);
    int (*system_get_driver_version)(char *version, unsigned int length);
    int (*system_get_cuda_driver_version_v2)(int *version);
    int (*device_get_cuda_compute_capability)(struct nvmlDevice_st *device, int *major, int *minor);
    int (*device_get_architecture)(struct nvmlDevice_st *device, unsigned int *arch);
    int (*device_get_pci_info_v3)(struct nvmlDevice_st *device, struct nvmlPciInfo_st *pci);
    int (*device_get_numa_node_id)(struct nvmlDevice_st *device, unsigned int *node);
    int (*event_set_create)(struct nvmlEventSet_st **set);
    int (*device_register_events)(struct nvmlDevice_st *device, unsigned long long types,
                                  struct nvmlEventSet_st *set);
    int (*event_set_wait_v2)(struct nvmlEventSet_st *set, struct nvmlEventData_st *data,
                             unsigned int timeout_ms);
    int (*event_set_free)(struct nvmlEventSet_st *set);
};

/* dlopen library (NULL = EGPU_NVML_LIBRARY) and resolve every symbol of
 * struct egpu_nvml_api into *api; calls nothing in the library. Returns 0
 * with the handle in *dl (dlclose it), -ENOENT (cannot load) or -ENOSYS (a
 * required symbol missing; the library is closed again). */
int egpu__nvml_load(const char *library, void **dl, struct egpu_nvml_api *api,
                    struct egpu_error *err);

#endif /* EGPU_NVML_INT_H */
