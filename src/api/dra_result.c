/* api/dra_result.c - the one decoder of a ResourceClaim's allocation results
 * of this driver (status.allocation.devices.results[], resource.k8s.io/v1
 * DeviceRequestAllocationResult: driver, pool, device, request, shareID,
 * consumedCapacity), and the device names of the agent's ResourceSlice
 * ("gpu-<index>"). The agent prepares what it decodes, the quota and the
 * metering (dra_usage.c) sum it, kubectl-egpu shows it.
 *
 * Wire format: kubernetes/api resource/v1/types.go as
 * ../shared/k8s-wire/dra/dra_notes.md sums it up: section 5 (results, at
 * most 32 per claim; shareID set for a device allocated with
 * allowMultipleAllocations; consumedCapacity only then), section 8 (fields
 * that come back as null, quantities always strings).
 *
 * DESIGN: the status is kube-scheduler's, but an API server without the DRA
 * validation keeps what anyone with write access to the claim's status
 * writes, so nothing is believed unchecked: every field of a result of ours
 * is type- and range-checked, and the first bad one refuses the claim with
 * its path and the allowed values. Results of other drivers are only checked
 * to be results (an object with a driver). Strings are copied into the
 * caller's fixed-size fields; nothing is allocated. Units: cores in percent
 * of one card (a whole number, as the slice's step 1 makes the allocator
 * write), memory in MiB rounded up from the quantity's bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "egpu/api.h"
#include "egpu/core.h"

#define RESULTS       "status.allocation.devices.results"
#define ALLOWED_CORES "allowed: a whole number 0..100 (percent of one card)"

int egpu_api_dra_device_name(uint32_t index, char *buf, size_t len)
{
    int n = snprintf(buf, len, EGPU_API_DRA_DEVICE_PREFIX "%" PRIu32, index);

    if (n < 0 || (size_t)n >= len) {
        if (len > 0)
            buf[0] = '\0';
        return -ENAMETOOLONG;
    }
    return 0;
}

bool egpu_api_dra_device_index(const char *device, uint32_t *index)
{
    const size_t k = sizeof(EGPU_API_DRA_DEVICE_PREFIX) - 1;
    uint64_t v = 0;
    const char *p;

    if (device == NULL || strncmp(device, EGPU_API_DRA_DEVICE_PREFIX, k) != 0)
        return false;
    p = device + k;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '\0'))
        return false;
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > UINT32_MAX)
            return false;
    }
    *index = (uint32_t)v;
    return true;
}

bool egpu_api_dra_is_share_id(const char *s)
{
    static const char hex[] = "0123456789abcdef";

    if (s == NULL || strlen(s) != 36)
        return false;
    for (size_t i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return false;
        } else if (strchr(hex, s[i]) == NULL) { /* s[i] is no NUL: strlen is 36 */
            return false;
        }
    }
    return true;
}

bool egpu_api_dra_is_request_name(const char *s)
{
    char first[64];
    const char *slash = s != NULL ? strchr(s, '/') : NULL;
    size_t n;

    if (s == NULL)
        return false;
    if (slash == NULL)
        return egpu_api_dns_label(s);
    n = (size_t)(slash - s);
    if (n >= sizeof(first))
        return false;
    memcpy(first, s, n);
    first[n] = '\0';
    return egpu_api_dns_label(first) && egpu_api_dns_label(slash + 1);
}

/* consumedCapacity[key] (path names consumedCapacity): a quantity string in
 * units of 2^bin, rounded up when bin > 0 (bytes to MiB) and exact
 * otherwise (a whole percent), within 0..max. *has: it is there. */
static int capacity(const json_t *cc, const char *key, const char *path, int bin, int64_t max,
                    const char *allowed, bool *has, int64_t *out, struct egpu_error *err)
{
    const json_t *v = json_object_get(cc, key);
    const char *s = egpu_api_str(v);
    struct egpu_quantity q;
    int64_t n;

    *has = false;
    if (v == NULL || json_is_null(v))
        return 0;
    if (s == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s.%s is not a quantity string; %s", path, key,
                              allowed);
    if (egpu_quantity_parse(s, &q, NULL) != 0 || q.negative ||
        egpu_quantity_to_units(&q, 0, bin, bin ? EGPU_ROUND_UP : EGPU_ROUND_EXACT, &n) != 0 ||
        n < 0 || n > max)
        return egpu_error_set(err, EGPU_ERANGE, "%s.%s is \"%.64s\"; %s", path, key, s, allowed);
    *has = true;
    *out = n;
    return 0;
}

/* Result r (at position i, of driver) into *o. */
static int one_result(const json_t *r, size_t i, struct egpu_api_dra_result *o,
                      struct egpu_error *err)
{
    char path[64], f[96];
    const json_t *cc;
    int rc;

    snprintf(path, sizeof(path), RESULTS "[%zu]", i);
    snprintf(f, sizeof(f), "%s.", path);
    memset(o, 0, sizeof(*o));
    o->at = i;
    if ((rc = egpu_api_field_text(r, "pool", f, true, o->pool, sizeof(o->pool), err)) != 0 ||
        (rc = egpu_api_field_text(r, "device", f, true, o->device, sizeof(o->device), err)) != 0)
        return rc;
    if (!egpu_api_dns_label(o->device))
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "%s.device is \"%s\"; allowed: a DNS label (a-z, 0-9, '-', at most "
                              "63), e.g. " EGPU_API_DRA_DEVICE_PREFIX "0",
                              path, o->device);
    o->has_index = egpu_api_dra_device_index(o->device, &o->index);
    if ((rc = egpu_api_field_text(r, "request", f, true, o->request, sizeof(o->request), err)) != 0)
        return rc;
    if (!egpu_api_dra_is_request_name(o->request))
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "%s.request is \"%.128s\"; allowed: a request name (a DNS label, or "
                              "two joined by '/')",
                              path, o->request);
    /* The scheduler's shareID is a fresh UUID (dra_notes.md 8); the agent
     * answers it to the kubelet and keeps it on disk, so nothing else is
     * carried. */
    rc = egpu_api_field_text(r, "shareID", f, false, o->share_id, sizeof(o->share_id), err);
    if (rc == 0 && o->share_id[0] != '\0' && !egpu_api_dra_is_share_id(o->share_id))
        rc = egpu_error_set(err, EGPU_ESYNTAX,
                            "%s.shareID is not a UID; allowed: absent, or 36 "
                            "characters, 8-4-4-4-12 lowercase hex digits",
                            path);
    if (rc)
        return rc;
    if ((rc = egpu_api_field_obj(r, "consumedCapacity", f, &cc, err)) != 0)
        return rc;
    o->whole = cc == NULL;
    o->core_pct = 100;
    snprintf(f, sizeof(f), "%s.consumedCapacity", path);
    rc = capacity(cc, EGPU_API_DRA_CAP_CORES, f, 0, 100, ALLOWED_CORES, &o->has_cores, &o->core_pct,
                  err);
    if (rc == 0)
        rc =
            capacity(cc, EGPU_API_DRA_CAP_MEMORY, f, 20, EGPU_API_GPU_MIB_MAX,
                     "allowed: a quantity of bytes 0..4294967295Mi", &o->has_mem, &o->mem_mib, err);
    if (!o->has_cores)
        o->core_pct = 100;
    if (!o->has_mem)
        o->mem_mib = 0;
    return rc;
}

int egpu_api_dra_results(const json_t *claim, const char *driver, struct egpu_api_dra_result *out,
                         size_t max, size_t *n, struct egpu_error *err)
{
    const json_t *st, *alloc, *devs, *results, *r;
    size_t i;
    int rc;

    *n = 0;
    if (driver == NULL)
        driver = EGPU_API_DRA_DRIVER;
    if (!json_is_object(claim))
        return egpu_error_set(err, EGPU_ESYNTAX, "not an object; allowed: a ResourceClaim");
    if ((rc = egpu_api_field_obj(claim, "status", "", &st, err)) != 0 ||
        (rc = egpu_api_field_obj(st, "allocation", "status.", &alloc, err)) != 0 ||
        (rc = egpu_api_field_obj(alloc, "devices", "status.allocation.", &devs, err)) != 0)
        return rc;
    results = json_object_get(devs, "results");
    if (results == NULL || json_is_null(results))
        return 0;
    if (!json_is_array(results))
        return egpu_error_set(err, EGPU_ESYNTAX, RESULTS " is not an array; allowed: an array");
    if (json_array_size(results) > EGPU_API_DRA_RESULTS_MAX)
        return egpu_error_set(err, EGPU_ERANGE, RESULTS " has %zu entries; allowed: at most %d",
                              json_array_size(results), EGPU_API_DRA_RESULTS_MAX);
    json_array_foreach(results, i, r)
    {
        const json_t *dv = json_object_get(r, "driver");
        const char *drv = egpu_api_str(dv);

        if (!json_is_object(r))
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  RESULTS "[%zu] is not an object; allowed: a "
                                          "DeviceRequestAllocationResult",
                                  i);
        if (dv == NULL || json_is_null(dv))
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  RESULTS "[%zu].driver is missing; allowed: a string", i);
        if (drv == NULL)
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  RESULTS "[%zu].driver is not a string; allowed: a string", i);
        if (strcmp(drv, driver) != 0)
            continue; /* another driver's device: not ours */
        if (*n == max)
            return egpu_error_set(err, EGPU_ERANGE,
                                  RESULTS "[%zu] is result %zu of driver %s; allowed: at most %zu",
                                  i, max + 1, driver, max);
        if ((rc = one_result(r, i, &out[*n], err)) != 0)
            return rc;
        (*n)++;
    }
    return 0;
}
