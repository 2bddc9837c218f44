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

struct egpu__gpus_ops {
    /* Cards into out[0 .. *n), any order (gpus.c sorts them by index). */
    int (*list)(void *impl, struct egpu_gpu_info *out, size_t cap, size_t *n,
                struct egpu_error *err);
    /* a != b, both checked to be listed indices only by the backend. */
    int (*link)(void *impl, uint32_t a, uint32_t b, enum egpu_gpu_link *out,
                struct egpu_error *err);
    int (*wait)(void *impl, long timeout_ms, struct egpu_error *err);
    void (*free)(void *impl);
};

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
