/* vcuda/nvml_abi.h - the few NVML calls the interposer wraps or uses.
 *
 * Source: the NVML API reference (nvml.h): nvmlReturn_t is an int,
 * nvmlDevice_t an opaque pointer, nvmlMemory_t {total, free, used} and
 * nvmlMemory_v2_t {version, total, reserved, free, used}, all in bytes.
 * Declared here under the project's own struct tags (no typedefs, house
 * style); the exported wrappers keep NVML's names and ABI.
 */
#ifndef EGPU_VCUDA_NVML_ABI_H
#define EGPU_VCUDA_NVML_ABI_H

#define EGPU_NVML_SUCCESS                  0
#define EGPU_NVML_ERROR_UNINITIALIZED      1
#define EGPU_NVML_ERROR_INVALID_ARGUMENT   2
#define EGPU_NVML_ERROR_LIBRARY_NOT_FOUND  12
#define EGPU_NVML_ERROR_FUNCTION_NOT_FOUND 13
#define EGPU_NVML_UUID_BUFFER_SIZE         96 /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */

struct egpu_nvml_device; /* opaque: nvmlDevice_t points to one */

/* nvmlMemory_t: bytes. */
struct egpu_nvml_memory {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
};

/* nvmlMemory_v2_t: bytes; version = sizeof | 2 << 24, set by the caller. */
struct egpu_nvml_memory_v2 {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
};

int nvmlDeviceGetMemoryInfo(struct egpu_nvml_device *device, struct egpu_nvml_memory *memory);
int nvmlDeviceGetMemoryInfo_v2(struct egpu_nvml_device *device, struct egpu_nvml_memory_v2 *memory);

#endif /* EGPU_VCUDA_NVML_ABI_H */
