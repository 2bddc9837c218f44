/* src/vcuda/inspect.h - egpu-vcuda-inspect: what a container's shared
 * regions hold, read without writing (docs/vcuda.md, "Inspecting a
 * container").
 *
 * inspect.c decodes the compute region from a byte buffer and renders a
 * whole report (text or JSON) from values already read; it does no I/O
 * but the FILE it prints to, so the fuzz target drives it with any bytes.
 * inspect_main.c opens the files read-only, judges each process's liveness
 * and fills struct egpu__vcuda_report. The memory region is decoded by
 * region.c (egpu__vcuda_region_decode), the owner of its layout.
 *
 * Units: memory in bytes inside, printed in MiB; times in nanoseconds of
 * CLOCK_MONOTONIC (the clock of the compute region), printed in ms.
 */
#ifndef EGPU_VCUDA_INSPECT_H
#define EGPU_VCUDA_INSPECT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "vcuda_int.h"

#define EGPU_VCUDA_INSPECT_API "egpu.vcuda-inspect/v1"

/* A read-only copy of a vcuda-core.shm. */
struct egpu__vcuda_core_view {
    uint32_t core_pct;       /* as the process that initialised it was configured */
    uint32_t core_limit_pct; /* the same (information: the limits come from vcuda.conf) */
    uint64_t tat_ns[EGPU_VCUDA_MAX_CARDS];       /* bucket: charges paid up to; 0 = never charged */
    uint64_t queue_end_ns[EGPU_VCUDA_MAX_CARDS]; /* the container's queued work ends; 0 = never */
};

/* Size a vcuda-core.shm needs, bytes (a longer file is read up to it). */
size_t egpu__vcuda_core_file_bytes(void);

/* Decode the len bytes of a vcuda-core.shm from buf (any alignment; not
 * trusted) into *out. Returns 0, or -EINVAL with err->msg naming the field
 * (truncated, magic, version, bytes). */
int egpu__vcuda_core_decode(const void *buf, size_t len, struct egpu__vcuda_core_view *out,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* How a slot's process was found. */
enum egpu__vcuda_liveness {
    EGPU_VCUDA_DEAD = 0,  /* gone: the interposer reclaims its slot at the next use */
    EGPU_VCUDA_ALIVE = 1, /* there, or /proc cannot tell (the interposer keeps it too) */
};

/* Everything one report shows; the caller owns and fills it. */
struct egpu__vcuda_report {
    const char *dir;                           /* the allocation directory given */
    const char *region_dir;                    /* where the regions are: <dir>/shared or dir */
    const char *conf_path;                     /* <dir>/vcuda.conf, NULL when there is none */
    const struct egpu__vcuda_config *cfg;      /* the limits (cfg->source NONE: none) */
    const char *mem_path;                      /* <region_dir>/vcuda-memory.shm */
    const struct egpu__vcuda_region_view *mem; /* NULL: there is no such file */
    enum egpu__vcuda_liveness alive[EGPU_VCUDA_REGION_SLOTS]; /* by mem->slots[] position */
    int32_t host_pid[EGPU_VCUDA_REGION_SLOTS]; /* the pid in this namespace, 0 = unknown */
    const char *core_path;                     /* <region_dir>/vcuda-core.shm */
    const struct egpu__vcuda_core_view *core;  /* NULL: there is no such file */
    uint64_t now_ns;                           /* CLOCK_MONOTONIC when the files were read */
};

/* Print r to f as text (a few lines per card) or as one JSON document
 * (apiVersion EGPU_VCUDA_INSPECT_API, every key always present, null when
 * unknown). */
void egpu__vcuda_report_text(FILE *f, const struct egpu__vcuda_report *r);
void egpu__vcuda_report_json(FILE *f, const struct egpu__vcuda_report *r);

#endif /* EGPU_VCUDA_INSPECT_H */
