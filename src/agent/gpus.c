/* agent/gpus.c - the node's cards, whatever backend finds them.
 *
 * struct egpu_gpus pairs a backend's operations (src/agent/gpus_int.h) with
 * its state. This file chooses the backend (--fake-gpus, then
 * $EGPU_FAKE_GPUS, then NVML), checks the arguments every backend would
 * otherwise check again, and hands lists back sorted by index, so callers
 * see the same contract from NVML and from the fake.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpus_int.h"

struct egpu_gpus {
    enum egpu_gpus_kind kind;
    const struct egpu__gpus_ops *ops;
    void *impl;
};

const char *egpu_gpu_link_name(enum egpu_gpu_link link)
{
    switch (link) {
    case EGPU_LINK_NVLINK:
        return "NV";
    case EGPU_LINK_BOARD:
        return "BOARD";
    case EGPU_LINK_PIX:
        return "PIX";
    case EGPU_LINK_PXB:
        return "PXB";
    case EGPU_LINK_PHB:
        return "PHB";
    case EGPU_LINK_NODE:
        return "NODE";
    case EGPU_LINK_SYS:
        return "SYS";
    case EGPU_LINK_UNKNOWN:
        break;
    }
    return "unknown";
}

const char *egpu_gpu_mem_source_name(enum egpu_gpu_mem_source source)
{
    switch (source) {
    case EGPU_MEM_SOURCE_V1:
        return "nvmlDeviceGetMemoryInfo";
    case EGPU_MEM_SOURCE_V2:
        return "nvmlDeviceGetMemoryInfo_v2";
    case EGPU_MEM_SOURCE_NONE:
        break;
    }
    return "none";
}

static int wrap(enum egpu_gpus_kind kind, const struct egpu__gpus_ops *ops, void *impl,
                struct egpu_gpus **out, struct egpu_error *err)
{
    struct egpu_gpus *g = egpu_calloc(1, sizeof(*g));

    if (g == NULL) {
        ops->free(impl);
        return egpu_error_set(err, -ENOMEM, "GPU backend: out of memory");
    }
    g->kind = kind;
    g->ops = ops;
    g->impl = impl;
    *out = g;
    return 0;
}

int egpu_gpus_open_nvml(const char *library, struct egpu_gpus **out, struct egpu_error *err)
{
    void *impl = NULL;
    int rc = egpu__nvml_open(library, &impl, err);

    if (rc)
        return rc;
    return wrap(EGPU_GPUS_NVML, &egpu__nvml_ops, impl, out, err);
}

int egpu_gpus_open_fake(const char *spec, const char *node, struct egpu_gpus **out,
                        struct egpu_error *err)
{
    void *impl = NULL;
    int rc = egpu__fake_open(spec, node != NULL ? node : "", &impl, err);

    if (rc)
        return rc;
    return wrap(EGPU_GPUS_FAKE, &egpu__fake_ops, impl, out, err);
}

int egpu_gpus_open(const struct egpu_gpus_config *cfg, struct egpu_gpus **out,
                   struct egpu_error *err)
{
    static const struct egpu_gpus_config none;
    const char *fake;

    if (cfg == NULL)
        cfg = &none;
    fake = cfg->fake;

    if (fake == NULL || fake[0] == '\0')
        fake = getenv(EGPU_FAKE_GPUS_ENV);
    if (fake != NULL && fake[0] != '\0')
        return egpu_gpus_open_fake(fake, cfg->node, out, err);
    return egpu_gpus_open_nvml(cfg->nvml_library, out, err);
}

void egpu_gpus_free(struct egpu_gpus *g)
{
    if (g == NULL)
        return;
    g->ops->free(g->impl);
    egpu_free(g);
}

enum egpu_gpus_kind egpu_gpus_kind(const struct egpu_gpus *g)
{
    return g->kind;
}

static int by_index(const void *a, const void *b)
{
    const struct egpu_gpu_info *x = a, *y = b;

    return (x->index > y->index) - (x->index < y->index);
}

int egpu_gpus_list(struct egpu_gpus *g, struct egpu_gpu_info *out, size_t cap, size_t *n,
                   struct egpu_error *err)
{
    size_t got = 0;
    int rc = g->ops->list(g->impl, out, cap, &got, err);

    if (rc)
        return rc;
    qsort(out, got, sizeof(*out), by_index);
    *n = got;
    return 0;
}

int egpu_gpus_link(struct egpu_gpus *g, uint32_t a, uint32_t b, enum egpu_gpu_link *out,
                   struct egpu_error *err)
{
    if (a == b)
        return egpu_error_set(err, -EINVAL, "GPU link: card %u with itself", a);
    return g->ops->link(g->impl, a, b, out, err);
}

void egpu__gpus_details(struct egpu_gpus *g, uint32_t index, struct egpu__gpu_details *out)
{
    memset(out, 0, sizeof(*out));
    out->numa_node = -1;
    if (g->ops->details != NULL)
        g->ops->details(g->impl, index, out);
    out->architecture[sizeof(out->architecture) - 1] = '\0';
    out->pci_bus_id[sizeof(out->pci_bus_id) - 1] = '\0';
}

void egpu__gpus_driver(struct egpu_gpus *g, struct egpu__gpus_driver *out)
{
    memset(out, 0, sizeof(*out));
    if (g->ops->driver != NULL)
        g->ops->driver(g->impl, out);
    out->version[sizeof(out->version) - 1] = '\0';
}

int egpu_gpus_wait(struct egpu_gpus *g, long timeout_ms, struct egpu_error *err)
{
    if (timeout_ms < 0)
        return egpu_error_set(err, -EINVAL, "GPU wait: negative timeout %ld ms", timeout_ms);
    return g->ops->wait(g->impl, timeout_ms, err);
}

int egpu_gpus_fake_set_health(struct egpu_gpus *g, uint32_t index, bool healthy, const char *reason,
                              struct egpu_error *err)
{
    if (g->kind != EGPU_GPUS_FAKE)
        return egpu_error_set(err, -EINVAL, "set GPU health: not a fake GPU backend");
    return egpu__fake_set_health(g->impl, index, healthy, reason, err);
}

int egpu_gpus_fake_set_link(struct egpu_gpus *g, uint32_t a, uint32_t b, enum egpu_gpu_link link,
                            struct egpu_error *err)
{
    if (g->kind != EGPU_GPUS_FAKE)
        return egpu_error_set(err, -EINVAL, "set GPU link: not a fake GPU backend");
    if (a == b)
        return egpu_error_set(err, -EINVAL, "set GPU link: card %u with itself", a);
    return egpu__fake_set_link(g->impl, a, b, link, err);
}
