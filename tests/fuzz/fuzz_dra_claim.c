/* tests/fuzz/fuzz_dra_claim.c - the decoders of a ResourceClaim's
 * allocation results and of what the DRA kubelet plugin's disk gives it: the
 * one decoder of status.allocation.devices.results (egpu_api_dra_results,
 * src/api/dra_result.c, which the agent, the quota and kubectl-egpu share),
 * the same results as egpu__dra_plugin_results reads them for this driver
 * and node (src/agent/dra_plugin.c), and a claim record
 * (<alloc_root>/dra/claim-<uid>.json) as egpu__dra_plugin_record_parse
 * reads it. The kubelet's bytes (NodePrepareResources, NodeUnprepare-
 * Resources) are fuzz_dra's.
 *
 * Input: JSON text, tried both as a ResourceClaim and as a record (of the
 * uid its "uid" member names when that is a valid claim uid, else of a fixed
 * one). Seeds: tests/fuzz/corpus/dra_claim, and the JSON objects of
 * shared/k8s-wire/dra read in place (scripts/fuzz.sh).
 * Invariants: egpu_api_dra_results, for this driver with room for 1, 3
 * and EGPU_API_DRA_RESULTS_MAX results, accepts the same claims whenever the
 * claim's results of this driver fit (and refuses with EGPU_ERANGE only
 * those that do not), gives the same results in increasing order of
 * position, each result's fields within their documented values (a request
 * name, a pool, a DNS-label device whose index round-trips through
 * egpu_api_dra_device_name, a shareID "" or a UID, cores 0..100, memory
 * 0..EGPU_API_GPU_MIB_MAX MiB, whole with no capacity named), and a message
 * on every refusal; egpu_api_dra_claim_held agrees with it (accepts exactly
 * the same claims that have an allocation, and counts one device per
 * result). Agent results accepted give 1..EGPU_CDI_DEVICES_MAX devices, each
 * a card of the node ("gpu-0" or "gpu-1") with cores 1..100, memory 1..the
 * card's MiB and a record device whose shareID is "" or a UID; refused ones
 * leave an error message; the record the agent would write for accepted
 * results decodes again to the same JSON (what prepare writes, prepare and
 * unprepare accept); a record accepted has 1..EGPU_CDI_DEVICES_MAX devices
 * whose dir lies right below the DRA root. Nothing leaks.
 */
#include <errno.h>
#include <limits.h>

#include "fuzz.h"
#include "egpu/api.h"
#include "allocdir_int.h"
#include "cdi_int.h"
#include "dra_plugin_int.h"

#define POOL     "gpu-node-1"
#define DRA_ROOT "/var/lib/elastic-gpu/alloc/dra"
#define UID0     "0d5e0f7a-0000-4000-8000-000000000001"

static struct egpu_gpu_info cards[2];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    memset(cards, 0, sizeof(cards));
    snprintf(cards[0].uuid, sizeof(cards[0].uuid), "GPU-fef8089b-4820-abfc-e83e-94318197576e");
    cards[0].index = 0;
    cards[0].mem_mib = 81920;
    cards[0].healthy = true;
    snprintf(cards[1].uuid, sizeof(cards[1].uuid), "GPU-5b4c2e1a-9d3f-4a7b-8c6e-1f2a3b4c5d6e");
    cards[1].index = 1;
    cards[1].minor = 1;
    cards[1].mem_mib = 16384;
    cards[1].healthy = true;
    return 0;
}

/* The uid the input is a record of. */
static const char *uid_of(const json_t *doc)
{
    const char *u = json_string_value(json_object_get(doc, "uid"));
    struct egpu_error err = {0};

    return u != NULL && egpu__cdi_check_uid(u, &err) == 0 ? u : UID0;
}

/* Results accepted: check them, and that their record decodes again. */
static void check_results(const char *uid, const struct egpu__cdi_device *devs, size_t n,
                          json_t *recdevs)
{
    json_t *doc, *back = NULL;
    struct egpu_error err = {0};
    char *text;
    size_t i;
    json_t *d;

    FUZZ_CHECK(n >= 1 && n <= EGPU_CDI_DEVICES_MAX && json_array_size(recdevs) == n);
    for (i = 0; i < n; i++) {
        const struct egpu_gpu_info *c = strcmp(devs[i].device, "gpu-0") == 0   ? &cards[0]
                                        : strcmp(devs[i].device, "gpu-1") == 0 ? &cards[1]
                                                                               : NULL;
        const char *share =
            json_string_value(json_object_get(json_array_get(recdevs, i), "shareID"));

        FUZZ_CHECK(c != NULL && strcmp(devs[i].uuid, c->uuid) == 0);
        FUZZ_CHECK(devs[i].core_pct >= 1 && devs[i].core_pct <= 100);
        FUZZ_CHECK(devs[i].mem_mib >= 1 && devs[i].mem_mib <= c->mem_mib);
        FUZZ_CHECK(share != NULL && (share[0] == '\0' || egpu_api_dra_is_share_id(share)));
    }
    doc = json_pack("{s:s,s:s,s:s,s:O}", "uid", uid, "namespace", "default", "name", "claim",
                    "devices", recdevs);
    FUZZ_CHECK(doc != NULL);
    json_array_foreach(json_object_get(doc, "devices"), i, d)
    {
        char id[EGPU_CDI_ID_MAX], dir[PATH_MAX];
        char *ids[1] = {id};

        FUZZ_CHECK(egpu__cdi_device_id(EGPU_API_DRA_DRIVER, uid, devs[i].device, id, sizeof(id),
                                       &err) == 0);
        FUZZ_CHECK(egpu__allocdir_path(DRA_ROOT, ids, 1, dir, sizeof(dir)) == 0);
        FUZZ_CHECK(json_object_set_new(d, "cdi", json_string(id)) == 0);
        FUZZ_CHECK(json_object_set_new(d, "dir", json_string(dir)) == 0);
    }
    text = json_dumps(doc, JSON_COMPACT);
    FUZZ_CHECK(text != NULL);
    /* Devices of one claim may repeat a card here (the CDI spec refuses
     * that later); the record itself must still decode. */
    FUZZ_CHECK(egpu__dra_plugin_record_parse(EGPU_API_DRA_DRIVER, DRA_ROOT, uid, text, strlen(text),
                                             &back, &err) == 0);
    FUZZ_CHECK(json_equal(doc, back));
    json_decref(back);
    free(text);
    json_decref(doc);
}

/* egpu_api_dra_results of claim with room for max results. */
static int decode(const json_t *claim, struct egpu_api_dra_result *out, size_t max, size_t *n,
                  struct egpu_error *err)
{
    int rc = egpu_api_dra_results(claim, EGPU_API_DRA_DRIVER, out, max, n, err);

    FUZZ_CHECK(rc == 0 || rc == EGPU_ESYNTAX || rc == EGPU_ERANGE);
    FUZZ_CHECK(rc != 0 || *n <= max);
    FUZZ_CHECK(rc == 0 || err->msg[0] != '\0');
    return rc;
}

static void decoded(const json_t *claim)
{
    static struct egpu_api_dra_result all[EGPU_API_DRA_RESULTS_MAX], few[3];
    struct egpu_error err = {0}, e2 = {0};
    struct egpu_api_dra_usage u;
    bool allocated = false;
    size_t n = 0, m = 0;
    int rc = decode(claim, all, EGPU_API_DRA_RESULTS_MAX, &n, &err), rc2;

    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct egpu_api_dra_result *r = &all[i];
        char name[EGPU_API_DRA_DEVICE_MAX];
        uint32_t idx = 0;

        FUZZ_CHECK(i == 0 || r->at > all[i - 1].at);
        FUZZ_CHECK(r->at < EGPU_API_DRA_RESULTS_MAX);
        FUZZ_CHECK(egpu_api_dra_is_request_name(r->request));
        FUZZ_CHECK(r->pool[0] != '\0' && strlen(r->pool) < EGPU_K8S_NAME_MAX);
        FUZZ_CHECK(egpu_api_dns_label(r->device));
        FUZZ_CHECK(r->has_index == egpu_api_dra_device_index(r->device, &idx));
        if (r->has_index) {
            FUZZ_CHECK(idx == r->index);
            FUZZ_CHECK(egpu_api_dra_device_name(r->index, name, sizeof(name)) == 0 &&
                       strcmp(name, r->device) == 0);
        }
        FUZZ_CHECK(r->share_id[0] == '\0' || egpu_api_dra_is_share_id(r->share_id));
        FUZZ_CHECK(r->core_pct >= 0 && r->core_pct <= 100);
        FUZZ_CHECK(r->has_cores || r->core_pct == 100);
        FUZZ_CHECK(r->mem_mib >= 0 && r->mem_mib <= EGPU_API_GPU_MIB_MAX);
        FUZZ_CHECK(r->has_mem || r->mem_mib == 0);
        FUZZ_CHECK(!r->whole || (!r->has_cores && !r->has_mem));
    }
    /* Less room: the same results while they fit, else EGPU_ERANGE. */
    for (size_t max = 1; max <= 3; max += 2) {
        rc2 = decode(claim, few, max, &m, &e2);
        if (rc == 0 && n <= max) {
            FUZZ_CHECK(rc2 == 0 && m == n);
            FUZZ_CHECK(memcmp(few, all, n * sizeof(*few)) == 0);
        } else if (rc == 0) {
            FUZZ_CHECK(rc2 == EGPU_ERANGE);
        } else {
            /* refused with room for all: refused with less room too, if
             * not for the same reason then for a result past max */
            FUZZ_CHECK(rc2 != 0);
        }
    }
    /* The quota reads the same results. */
    rc2 = egpu_api_dra_claim_held(claim, &u, &allocated, NULL, &e2);
    FUZZ_CHECK(rc2 == 0 || rc2 == EGPU_ESYNTAX || rc2 == EGPU_ERANGE || rc2 == -ENOMEM);
    if (allocated && rc2 != -ENOMEM) {
        FUZZ_CHECK((rc == 0) == (rc2 == 0));
        FUZZ_CHECK(rc2 != 0 || u.devices == (int64_t)n);
    }
}

static void results(const json_t *claim, const char *uid)
{
    struct egpu__cdi_device devs[EGPU_CDI_DEVICES_MAX];
    struct egpu_error err = {0};
    json_t *recdevs = json_array();
    size_t n = 0;
    int rc;

    FUZZ_CHECK(recdevs != NULL);
    rc = egpu__dra_plugin_results(EGPU_API_DRA_DRIVER, POOL, cards, 2, claim, devs, &n, recdevs,
                                  &err);
    if (rc == 0)
        check_results(uid, devs, n, recdevs);
    else
        FUZZ_CHECK((rc == -EINVAL || rc == -ENOMEM) && err.msg[0] != '\0');
    json_decref(recdevs);
}

static void record(const char *uid, const char *text, size_t len)
{
    struct egpu_error err = {0};
    json_t *rec = NULL;
    const json_t *d;
    size_t i;
    int rc =
        egpu__dra_plugin_record_parse(EGPU_API_DRA_DRIVER, DRA_ROOT, uid, text, len, &rec, &err);

    if (rc != 0) {
        FUZZ_CHECK(rc == EGPU_ESYNTAX && rec == NULL && err.msg[0] != '\0');
        return;
    }
    FUZZ_CHECK(json_array_size(json_object_get(rec, "devices")) >= 1 &&
               json_array_size(json_object_get(rec, "devices")) <= EGPU_CDI_DEVICES_MAX);
    json_array_foreach(json_object_get(rec, "devices"), i, d)
    {
        const char *dir = json_string_value(json_object_get(d, "dir"));

        /* What unprepare removes: one name of 16 hex digits below the root. */
        FUZZ_CHECK(dir != NULL && strncmp(dir, DRA_ROOT "/", sizeof(DRA_ROOT)) == 0 &&
                   egpu__allocdir_is_name(dir + sizeof(DRA_ROOT)));
    }
    json_decref(rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    long live = egpu_alloc_live();
    char *exact = fuzz_dup(data, size); /* exact size: ASan sees a read past the end */
    json_error_t jerr;
    json_t *doc = json_loadb(exact, size, 0, &jerr);
    const char *uid = uid_of(doc);

    decoded(doc);
    results(doc, uid);
    record(uid, exact, size);
    json_decref(doc);
    FUZZ_CHECK(egpu_alloc_live() == live);
    free(exact);
    return 0;
}
