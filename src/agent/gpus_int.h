/* agent/gpus_int.h - the backend interface behind struct egpu_gpus.
 *
 * src/agent/gpus.c owns struct egpu_gpus and checks arguments (capacity,
 * indices, a != b, the kind of backend for fake-only calls); a backend
 * (nvml.c, fake.c) fills in the operations below on an opaque impl. Each
 * operation follows the contract of the egpu_gpus_* function of the same
 * name in egpu/agent.h.
 */
#ifndef EGPU_GPUS_INT_H
#define EGPU_GPUS_INT_H

#include "egpu/agent.h"

/* What a card tells beyond struct egpu_gpu_info, for the DRA mode's
 * ResourceSlice attributes (dra_slice_int.h). Unknown fields: "" or 0, and
 * numa_node -1. */
struct egpu__gpu_details {
    char architecture[32]; /* "Ampere", "Hopper"... */
    uint32_t cc_major;     /* CUDA compute capability; 0 = unknown */
    uint32_t cc_minor;
    char pci_bus_id[32]; /* "0000:18:00.0" (domain:bus:device.function, lowercase hex) */
    int numa_node;       /* -1 = unknown */
};

/* The driver of the node's cards. Unknown fields: "" or 0. */
struct egpu__gpus_driver {
    char version[80];      /* NVIDIA driver, e.g. "570.133.20" */
    uint32_t cuda_version; /* the CUDA version it supports, 1000 * major + 10 * minor */
};

struct egpu__gpus_ops {
    /* Cards into out[0 .. *n), any order (gpus.c sorts them by index). */
    int (*list)(void *impl, struct egpu_gpu_info *out, size_t cap, size_t *n,
                struct egpu_error *err);
    /* a != b, both checked to be listed indices only by the backend. */
    int (*link)(void *impl, uint32_t a, uint32_t b, enum egpu_gpu_link *out,
                struct egpu_error *err);
    int (*wait)(void *impl, long timeout_ms, struct egpu_error *err);
    void (*free)(void *impl);
    /* Best effort, never an error: what cannot be read stays unknown. */
    void (*details)(void *impl, uint32_t index, struct egpu__gpu_details *out);
    void (*driver)(void *impl, struct egpu__gpus_driver *out);
};

/* The details of the card of index (out zeroed first, numa_node -1), and
 * the driver of g's cards: what the backend can tell (NVML: architecture,
 * compute capability, PCI bus ID, NUMA node, driver and CUDA versions, each
 * only where the library has the call and it succeeds; fake: from the
 * model's name and fixed driver versions, fake.c). Never fails. */
void egpu__gpus_details(struct egpu_gpus *g, uint32_t index, struct egpu__gpu_details *out);
void egpu__gpus_driver(struct egpu_gpus *g, struct egpu__gpus_driver *out);

extern const struct egpu__gpus_ops egpu__nvml_ops;
extern const struct egpu__gpus_ops egpu__fake_ops;

/* Backend constructors: *impl for the ops above, only on success. */
int egpu__nvml_open(const char *library, void **impl, struct egpu_error *err);
int egpu__fake_open(const char *spec, const char *node, void **impl, struct egpu_error *err);

/* Fake-only operations (gpus.c has checked the kind). */
int egpu__fake_set_health(void *impl, uint32_t index, bool healthy, const char *reason,
                          struct egpu_error *err);
int egpu__fake_set_link(void *impl, uint32_t a, uint32_t b, enum egpu_gpu_link link,
                        struct egpu_error *err);

#endif /* EGPU_GPUS_INT_H */
