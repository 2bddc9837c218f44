/* api/dra_usage.c - what a ResourceClaim or ResourceClaimTemplate asks of
 * this driver's DeviceClasses (its spec, a tenant's text: every field
 * checked, errors naming it), and what an allocated ResourceClaim holds (its
 * status, written by kube-scheduler's allocator, decoded by dra_result.c,
 * summed here). Wire format:
 * resource.k8s.io/v1 (../shared/k8s-wire/dra/dra_notes.md sections 5 to 7).
 * No I/O. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "egpu/api.h"
#include "egpu/core.h"

#define ALLOWED_CORES "allowed: a whole number 0..100 (percent of one card)"
#define ALLOWED_MEM   "allowed: a quantity of bytes, e.g. \"4Gi\" or \"4096Mi\", at most 1Pi"

/* Quantity text v (field path) in units of 10^dec * 2^bin, rounded up,
 * within [0, max]. */
static int quantity(const json_t *v, const char *path, int bin, int64_t max, const char *allowed,
                    int64_t *out, struct egpu_error *err)
{
    const char *s = egpu_api_str(v);
    struct egpu_quantity q;
    int64_t n;

    if (s == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s is not a quantity string; %s", path, allowed);
    if (egpu_quantity_parse(s, &q, NULL) != 0 || q.negative ||
        egpu_quantity_to_units(&q, 0, bin, bin ? EGPU_ROUND_UP : EGPU_ROUND_EXACT, &n) != 0 ||
        n < 0 || n > max)
        return egpu_error_set(err, EGPU_ERANGE, "%s is \"%.64s\"; %s", path, s, allowed);
    *out = n;
    return 0;
}

/* One exactly or subrequest r (path) into *u; nothing when its class is not
 * ours. */
static int one_request(const json_t *r, const char *path, struct egpu_api_dra_usage *u,
                       struct egpu_error *err)
{
    const json_t *cls = json_object_get(r, "deviceClassName");
    const json_t *mode = json_object_get(r, "allocationMode");
    const json_t *count = json_object_get(r, "count");
    const json_t *cap = json_object_get(r, "capacity"), *reqs, *v;
    const char *name = egpu_api_str(cls), *key;
    int64_t n = 1, cores = 100, mem = 0;
    bool has_mem = false;
    char f[512];

    memset(u, 0, sizeof(*u));
    if (!json_is_object(r))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s is not an object", path);
    if (name == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "%s.deviceClassName is missing or not a string; allowed: a "
                              "DeviceClass name, e.g. " EGPU_API_DRA_CLASS_SHARE,
                              path);
    if (strcmp(name, EGPU_API_DRA_CLASS_SHARE) != 0 &&
        strcmp(name, EGPU_API_DRA_CLASS_WHOLE) != 0 &&
        strncmp(name, EGPU_API_DRA_OBJECT_PREFIX, sizeof(EGPU_API_DRA_OBJECT_PREFIX) - 1) != 0)
        return 0; /* another driver's class: not ours to count */
    if (mode != NULL && !json_is_null(mode) &&
        (egpu_api_str(mode) == NULL || strcmp(egpu_api_str(mode), "ExactCount") != 0))
        return egpu_error_set(err, EGPU_ERANGE,
                              "%s.allocationMode is %s; allowed: ExactCount (a number of cards "
                              "of class %s; All is refused, its size is not known at admission)",
                              path, egpu_api_str(mode) ? egpu_api_str(mode) : "not a string", name);
    if (count != NULL && !json_is_null(count)) {
        if (!json_is_integer(count) || json_integer_value(count) < 1 ||
            json_integer_value(count) > EGPU_API_DRA_USAGE_COUNT_MAX)
            return egpu_error_set(err, EGPU_ERANGE, "%s.count is not a whole number 1..%d", path,
                                  EGPU_API_DRA_USAGE_COUNT_MAX);
        n = json_integer_value(count);
    }
    if (cap != NULL && !json_is_null(cap)) {
        reqs = json_object_get(cap, "requests");
        if (!json_is_object(cap) || (reqs != NULL && !json_is_object(reqs) && !json_is_null(reqs)))
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "%s.capacity is not {\"requests\": {\"cores\": ..., \"memory\": "
                                  "...}}",
                                  path);
        json_object_foreach((json_t *)reqs, key, v)
        {
            int rc;

            snprintf(f, sizeof(f), "%s.capacity.requests.%.64s", path, key);
            if (strcmp(key, EGPU_API_DRA_CAP_CORES) == 0) {
                rc = quantity(v, f, 0, 100, ALLOWED_CORES, &cores, err);
            } else if (strcmp(key, EGPU_API_DRA_CAP_MEMORY) == 0) {
                rc = quantity(v, f, 20, EGPU_API_DRA_USAGE_MEM_MAX, ALLOWED_MEM, &mem, err);
                has_mem = true;
            } else {
                return egpu_error_set(err, EGPU_ERANGE,
                                      "%s names capacity \"%.64s\", which devices of %s do not "
                                      "have; allowed: " EGPU_API_DRA_CAP_CORES
                                      ", " EGPU_API_DRA_CAP_MEMORY,
                                      f, key, name);
            }
            if (rc)
                return rc;
        }
    }
    u->devices = n;
    u->cores = n * cores;
    u->mem_mib = has_mem ? n * mem : 0;
    u->mem_whole = has_mem ? 0 : n;
    return 0;
}

static void add(struct egpu_api_dra_usage *to, const struct egpu_api_dra_usage *u)
{
    to->cores += u->cores;
    to->mem_mib += u->mem_mib;
    to->devices += u->devices;
    to->mem_whole += u->mem_whole;
}

static void larger(struct egpu_api_dra_usage *to, const struct egpu_api_dra_usage *u)
{
    to->cores = u->cores > to->cores ? u->cores : to->cores;
    to->mem_mib = u->mem_mib > to->mem_mib ? u->mem_mib : to->mem_mib;
    to->devices = u->devices > to->devices ? u->devices : to->devices;
    to->mem_whole = u->mem_whole > to->mem_whole ? u->mem_whole : to->mem_whole;
}

int egpu_api_dra_spec_usage(const json_t *spec, const char *field, struct egpu_api_dra_usage *out,
                            struct egpu_error *err)
{
    const json_t *devs, *reqs, *r;
    size_t i;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (field == NULL)
        field = "spec";
    if (spec == NULL || json_is_null(spec))
        return 0;
    if (!json_is_object(spec))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s is not an object", field);
    devs = json_object_get(spec, "devices");
    if (devs == NULL || json_is_null(devs))
        return 0;
    reqs = json_object_get(devs, "requests");
    if (!json_is_object(devs) || (reqs != NULL && !json_is_null(reqs) && !json_is_array(reqs)))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s.devices.requests is not a list", field);
    json_array_foreach(reqs, i, r)
    {
        const json_t *ex = json_object_get(r, "exactly"),
                     *fa = json_object_get(r, "firstAvailable");
        struct egpu_api_dra_usage u = {0}, best = {0};
        char path[256];

        if (ex != NULL && !json_is_null(ex)) {
            snprintf(path, sizeof(path), "%.120s.devices.requests[%zu].exactly", field, i);
            rc = one_request(ex, path, &u, err);
            best = u;
        } else if (json_is_array(fa) && json_array_size(fa) > 0) {
            const json_t *sub;
            size_t j;

            json_array_foreach(fa, j, sub)
            {
                snprintf(path, sizeof(path), "%.120s.devices.requests[%zu].firstAvailable[%zu]",
                         field, i, j);
                rc = one_request(sub, path, &u, err);
                if (rc)
                    break;
                larger(&best, &u);
            }
        } else {
            rc = egpu_error_set(err, EGPU_ESYNTAX,
                                "%.120s.devices.requests[%zu] has neither exactly nor "
                                "firstAvailable; allowed: one of them",
                                field, i);
        }
        if (rc)
            break;
        add(out, &best);
    }
    if (rc)
        memset(out, 0, sizeof(*out));
    return rc;
}

int egpu_api_dra_claim_held(const json_t *claim, struct egpu_api_dra_usage *out, bool *allocated,
                            bool *in_use, struct egpu_error *err)
{
    const json_t *st = json_object_get(claim, "status");
    struct egpu_api_dra_result *res = NULL;
    size_t n = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    if (allocated != NULL)
        *allocated = json_is_object(json_object_get(st, "allocation"));
    if (in_use != NULL)
        *in_use = json_array_size(json_object_get(st, "reservedFor")) > 0;
    if (!json_is_object(json_object_get(st, "allocation")))
        return 0;
    res = egpu_calloc(EGPU_API_DRA_RESULTS_MAX, sizeof(*res));
    if (res == NULL)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    rc = egpu_api_dra_results(claim, EGPU_API_DRA_DRIVER, res, EGPU_API_DRA_RESULTS_MAX, &n, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct egpu_api_dra_result *r = &res[i];

        out->devices++;
        out->cores += r->core_pct; /* 100 for a whole card */
        /* A share's memory counts; a whole card's, or a device whose memory
         * is not named, takes its card's, counted in mem_whole (as a pod's
         * whole cards count no gpu-memory). */
        if (!r->whole && r->has_mem && r->core_pct < 100)
            out->mem_mib += r->mem_mib;
        else
            out->mem_whole++;
    }
    egpu_free(res);
    if (rc)
        memset(out, 0, sizeof(*out));
    return rc;
}

int egpu_api_dra_meter_read(const json_t *claim, struct egpu_api_meter_pod *out,
                            struct egpu_error *err)
{
    const json_t *md = json_object_get(claim, "metadata");
    const char *at = egpu_api_str(json_object_get(
        json_object_get(json_object_get(claim, "status"), "allocation"), "allocationTimestamp"));
    const char *created = egpu_api_str(json_object_get(md, "creationTimestamp"));
    const char *del = egpu_api_str(json_object_get(md, "deletionTimestamp"));
    struct egpu_api_dra_usage u;
    bool allocated = false;
    int rc;

    memset(out, 0, sizeof(*out));
    out->end_s = INT64_MAX;
    rc = egpu_api_dra_claim_held(claim, &u, &allocated, NULL, err);
    if (rc == 0 && allocated && u.devices > 0) {
        if (at != NULL)
            rc = egpu_api_time_parse(at, "status.allocation.allocationTimestamp", &out->start_s,
                                     err);
        else
            rc = egpu_api_time_parse(created, "metadata.creationTimestamp", &out->start_s, err);
        if (rc == 0 && del != NULL)
            rc = egpu_api_time_parse(del, "metadata.deletionTimestamp", &out->end_s, err);
        out->core_pct = u.cores;
        out->mem_mib = u.mem_mib;
    }
    if (rc) {
        memset(out, 0, sizeof(*out));
        out->end_s = INT64_MAX;
    }
    return rc;
}
