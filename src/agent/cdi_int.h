/* agent/cdi_int.h - the CDI spec of one prepared DRA claim (cdi.c), private
 * to src/agent: what NodePrepareResources writes so the container runtime
 * gives a claim's containers their share, and the CDI device IDs it answers
 * the kubelet.
 *
 * One transient spec file per claim, <cdi dir>/k8s.<driver>-claim_<claim
 * uid>.json, kind k8s.<driver>/claim, one device per allocation result
 * named <claim uid>-<device> (the convention of NVIDIA's and HAMi's DRA
 * drivers; ../shared/k8s-wire/dra/cdi_notes.md). Each device injects what
 * device-plugin mode's Allocate and PreStartContainer give a container for
 * the same share (allocate.c, container.c): its /dev/nvidia<minor>, the
 * share's allocation dir (allocdir_int.h's layout, with vcuda.conf)
 * read-only at /etc/elastic-gpu, and for a share of a card its shared/
 * read-write and its ld.so.preload at /etc/ld.so.preload; the env repeats
 * vcuda.conf (the interposer reads the file first, which no variable can
 * override). The spec-level edits, applied with any device, are the
 * control nodes and, when a device shares its card, the interposer.
 *
 * Units: core in percent of one card, memory in MiB per card.
 */
#ifndef EGPU_AGENT_CDI_INT_H
#define EGPU_AGENT_CDI_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "egpu/core.h"

#define EGPU_CDI_DIR           "/var/run/cdi" /* the runtimes' dynamic spec dir */
#define EGPU_CDI_VENDOR_PREFIX "k8s."         /* vendor = "k8s." + the driver's name */
#define EGPU_CDI_CLASS         "claim"        /* the kind's class */
#define EGPU_CDI_VENDOR_LEN    253            /* most characters of a vendor (DNS subdomain) */
#define EGPU_CDI_CLASS_LEN     63             /* most characters of a class */
#define EGPU_CDI_UID_LEN       128            /* most characters of a claim UID */
#define EGPU_CDI_DEVICE_LEN    63             /* most characters of a device (DNS label) */
#define EGPU_CDI_DEVICES_MAX   32             /* allocation results of one claim */
/* "<vendor>/<class>=<uid>-<device>" incl. NUL */
#define EGPU_CDI_ID_MAX                                                        \
    (EGPU_CDI_VENDOR_LEN + 1 + EGPU_CDI_CLASS_LEN + 1 + EGPU_CDI_UID_LEN + 1 + \
     EGPU_CDI_DEVICE_LEN + 1)
#define EGPU_CDI_SPEC_MAX 65536 /* bytes of one spec file */

/* One allocation result of the claim, prepared: its share's allocation dir
 * holds vcuda.conf (and, sharing the card, ld.so.preload and shared/) as
 * container.c and allocate.c write them. All borrowed. */
struct egpu__cdi_device {
    const char *device;    /* the result's device in the pool, e.g. "gpu-0" */
    const char *uuid;      /* the card's UUID, "GPU-..." */
    uint32_t minor;        /* /dev/nvidia<minor> */
    unsigned core_pct;     /* consumed cores: 1..99 a share, 100 the whole card */
    unsigned core_limit;   /* EGPU_VCUDA_CORE_LIMIT, core_pct..100; 0: core_pct */
    unsigned mem_mib;      /* consumed memory, MiB; >= 1 for a share */
    const char *alloc_dir; /* host path of the share's allocation dir (egpu__allocdir_path) */
};

/* One prepared claim. All borrowed. */
struct egpu__cdi_claim {
    const char *driver;     /* the DRA driver's name, e.g. "gpu.elasticgpu.io" */
    const char *claim_uid;  /* the ResourceClaim's metadata.uid */
    const char *interposer; /* host path of libegpu-vcuda.so (mounted at the same path) */
    unsigned ctx_extra_mib; /* vcuda.conf's EGPU_VCUDA_CONTEXT_EXTRA_MIB; 0: none */
    const struct egpu__cdi_device *devices;
    size_t ndevices; /* 1..EGPU_CDI_DEVICES_MAX */
};

/* Check the claim UID uid against the CDI name rules (it starts the device
 * names and names the spec file): 1..EGPU_CDI_UID_LEN letters, digits, '-',
 * '_' or '.', the first a letter or a digit. Returns 0 or -EINVAL with err
 * `claim UID "<uid>": <what is wrong> (allowed: ...)`. */
int egpu__cdi_check_uid(const char *uid, struct egpu_error *err) EGPU_MUST_CHECK;

/* The spec file's name for the claim, "k8s.<driver>-claim_<uid>.json"
 * (the CDI library's transient spec name), into out (len bytes). Returns
 * 0, -EINVAL (driver or uid breaks the CDI rules; err names the field and
 * what is allowed) or -ENAMETOOLONG with err. */
int egpu__cdi_spec_name(const char *driver, const char *uid, char *out, size_t len,
                        struct egpu_error *err) EGPU_MUST_CHECK;

/* The fully qualified CDI device ID of the claim's device,
 * "k8s.<driver>/claim=<uid>-<device>", into out (len bytes, at least
 * EGPU_CDI_ID_MAX always fits). Returns 0, -EINVAL (err names the field
 * that breaks the CDI rules, and what is allowed) or -ENAMETOOLONG. */
int egpu__cdi_device_id(const char *driver, const char *uid, const char *device, char *out,
                        size_t len, struct egpu_error *err) EGPU_MUST_CHECK;

/* The CDI spec of claim c as a new JSON object into *out (json_decref it):
 * cdiVersion the lowest the fields need (egpu__cdi_min_version), kind,
 * devices and containerEdits as this header's opening says. Checks c
 * first: the driver, claim UID and device names against the CDI rules,
 * 1..EGPU_CDI_DEVICES_MAX devices with distinct names, a share of a card
 * (core below 100) alone in its claim (every device mounts its dir at
 * /etc/elastic-gpu, where the interposer reads one vcuda.conf), core
 * 1..100, core limit core..100 or 0, memory >= 1 MiB for a share,
 * absolute allocation dirs and interposer. Returns 0, -EINVAL with err naming the
 * field, its value and what is allowed, or -ENOMEM. */
int egpu__cdi_spec_build(const struct egpu__cdi_claim *c, json_t **out,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* The lowest cdiVersion that spec's fields need (cdi_notes.md 2): "0.3.0",
 * "0.4.0" (mounts[].type), "0.5.0" (deviceNodes[].hostPath, a device name
 * starting with a digit), "0.6.0" (annotations, a '.' in the class),
 * "0.7.0" (intelRdt, additionalGids) or "1.1.0" (netDevices,
 * intelRdt.schemata or enableMonitoring). A static string. */
const char *egpu__cdi_min_version(const json_t *spec);

/* Check spec (borrowed) against what a CDI loader refuses: unknown keys,
 * a cdiVersion unknown or below egpu__cdi_min_version, a kind that is not
 * vendor/class by the CDI rules, no devices, a device name breaking them or
 * repeated, a device without edits, an env entry without a '=' after its
 * first character, a device node without an absolute path, with a type
 * other than b, c, u, p, a number field that is no integer >= 0, or
 * permissions other than r, w, m, a
 * mount without hostPath or containerPath, a hook without a known hookName
 * or an absolute path. Returns 0 or -EINVAL with err naming the field. */
int egpu__cdi_spec_check(const json_t *spec, struct egpu_error *err) EGPU_MUST_CHECK;

/* Write claim c's spec (egpu__cdi_spec_build, then egpu__cdi_spec_check)
 * into the directory cdi_dir (made, mode 0755, when missing) as
 * egpu__cdi_spec_name, atomically: the directory opened with O_DIRECTORY |
 * O_NOFOLLOW, a temporary ".<name>.<hex>" (a name runtimes do not load)
 * made with O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode 0644, then renamed over
 * the name (allocfs.c's egpu__fs_write_at). Refused: a cdi_dir that is a
 * symbolic link (-ELOOP) or that someone else may write (-EPERM), and
 * anything but a regular file at the name (-ELOOP for a link, -EISDIR or
 * -EINVAL otherwise). On success ids[i] (c->ndevices of them, the
 * caller's) get each device's egpu__cdi_device_id, in c's order; on
 * failure the old file, if any, is as it was. Returns 0 or a negative code
 * with err. */
int egpu__cdi_spec_write(const char *cdi_dir, const struct egpu__cdi_claim *c,
                         char (*ids)[EGPU_CDI_ID_MAX], struct egpu_error *err) EGPU_MUST_CHECK;

/* Remove the claim's spec file from cdi_dir (opened as egpu__cdi_spec_write
 * opens it). A file or cdi_dir that is not there is success: unprepare of an
 * unknown claim. Returns 0, -EINVAL (driver or uid breaks the CDI rules),
 * -ELOOP (cdi_dir is a symbolic link) or -errno, with err. */
int egpu__cdi_spec_remove(const char *cdi_dir, const char *driver, const char *uid,
                          struct egpu_error *err) EGPU_MUST_CHECK;

#endif /* EGPU_AGENT_CDI_INT_H */
