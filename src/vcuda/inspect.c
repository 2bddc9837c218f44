/* vcuda/inspect.c - egpu-vcuda-inspect's decoding of the compute region and
 * its two renderings (inspect.h).
 *
 * DESIGN: nothing read from a region is believed. The memory region comes
 * decoded by region.c (header checked as the interposer checks it; every
 * count bounded); the compute region is checked here against its layout in
 * throttle.h (size, magic, version, bytes). Everything the renderings index
 * is a fixed-size array indexed by a loop bound, never by a value from a
 * file. Values a writer in the container can choose (totals, bytes, bucket
 * times, pids) are only printed, with the sums computed here in saturating
 * arithmetic.
 *
 * What the report says about a card:
 *   memory: the limit (vcuda.conf), the bytes of the live slots (what the
 *           interposer counts against the limit once it has reclaimed the
 *           dead ones) and the total the region records; each slot's bytes;
 *   compute: the bucket's position against now: more than
 *           EGPU_VCUDA_THROTTLE_TAU_NS ahead, launches wait ("throttled");
 *           ahead by less, the container is spending its burst ("busy");
 *           behind now, it has its whole burst ("idle"); never charged
 *           ("unused"); more than EGPU_VCUDA_THROTTLE_CORRUPT_NS ahead, the
 *           next launch resets it ("corrupt"). And when the container's
 *           queued work should end.
 * The compute share is the container's (one bucket per card), not each
 * process's: the regions keep no per-process compute figure.
 *
 * Units: bytes inside, MiB printed; CLOCK_MONOTONIC ns inside, ms printed.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "inspect.h"
#include "throttle.h"

#define MIB_BYTES ((uint64_t)1 << 20)
#define MS_NS     1000000.0

size_t egpu__vcuda_core_file_bytes(void)
{
    return sizeof(struct egpu__vcuda_throttle_region);
}

int egpu__vcuda_core_decode(const void *buf, size_t len, struct egpu__vcuda_core_view *out,
                            struct egpu_error *err)
{
    struct egpu__vcuda_throttle_region r; /* a copy: buf need not be aligned */

    if (len < sizeof(r))
        return egpu_error_set(err, -EINVAL, "truncated (size %zu bytes, expected %zu)", len,
                              sizeof(r));
    memcpy(&r, buf, sizeof(r));
    if (r.magic != THR_MAGIC)
        return egpu_error_set(err, -EINVAL, "corrupted (bad magic 0x%llx)",
                              (unsigned long long)r.magic);
    if (r.version != THR_VERSION)
        return egpu_error_set(err, -EINVAL, "of another version (version %u, expected %u)",
                              r.version, THR_VERSION);
    if (r.bytes != sizeof(r))
        return egpu_error_set(err, -EINVAL, "of another layout (bytes %u, expected %zu)", r.bytes,
                              sizeof(r));
    memset(out, 0, sizeof(*out));
    out->core_pct = r.core_pct;
    out->core_limit_pct = r.core_limit_pct;
    for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++) {
        out->tat_ns[c] = atomic_load_explicit(&r.card[c].tat_ns, memory_order_relaxed);
        out->queue_end_ns[c] = atomic_load_explicit(&r.card[c].queue_end_ns, memory_order_relaxed);
    }
    return 0;
}

/* ---- What both renderings compute. ---- */

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Bytes of the live slots on the region's card c. */
static uint64_t live_bytes(const struct egpu__vcuda_report *r, int c)
{
    uint64_t sum = 0;

    for (unsigned i = 0; i < r->mem->nslots && i < EGPU_VCUDA_REGION_SLOTS; i++) {
        if (r->alive[i] == EGPU_VCUDA_ALIVE)
            sum = add_sat(sum, r->mem->slots[i].bytes[c]);
    }
    return sum;
}

static unsigned live_count(const struct egpu__vcuda_report *r)
{
    unsigned n = 0;

    for (unsigned i = 0; i < r->mem->nslots && i < EGPU_VCUDA_REGION_SLOTS; i++)
        n += r->alive[i] == EGPU_VCUDA_ALIVE;
    return n;
}

static bool has_memory_limit(const struct egpu__vcuda_report *r, const struct egpu__vcuda_uuid *u)
{
    return r->cfg != NULL && r->cfg->source != EGPU_VCUDA_SRC_NONE && r->cfg->has_memory &&
           egpu__vcuda_config_covers(r->cfg, u);
}

static bool has_core_limit(const struct egpu__vcuda_report *r)
{
    return r->cfg != NULL && r->cfg->source != EGPU_VCUDA_SRC_NONE && r->cfg->has_core;
}

/* Compute cards shown: the configured ones, else those ever charged. */
static int core_cards(const struct egpu__vcuda_report *r)
{
    int n = 0;

    if (r->cfg != NULL && r->cfg->source != EGPU_VCUDA_SRC_NONE && r->cfg->ngpus > 0)
        return (int)r->cfg->ngpus;
    for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++) {
        if (r->core->tat_ns[c] != 0 || r->core->queue_end_ns[c] != 0)
            n = c + 1;
    }
    return n;
}

/* ns as signed ms from now (saturating; the file's times are anything). */
static double ms_from(uint64_t t_ns, uint64_t now_ns)
{
    return t_ns >= now_ns ? (double)(t_ns - now_ns) / MS_NS : -((double)(now_ns - t_ns) / MS_NS);
}

static const char *bucket_state(uint64_t tat_ns, uint64_t now_ns)
{
    if (tat_ns == 0)
        return "unused";
    if (tat_ns > now_ns && tat_ns - now_ns > EGPU_VCUDA_THROTTLE_CORRUPT_NS)
        return "corrupt";
    if (tat_ns > now_ns && tat_ns - now_ns > EGPU_VCUDA_THROTTLE_TAU_NS)
        return "throttled";
    if (tat_ns > now_ns)
        return "busy";
    return "idle";
}

static void print_mib(FILE *f, uint64_t bytes)
{
    if (bytes % MIB_BYTES == 0)
        fprintf(f, "%" PRIu64, bytes / MIB_BYTES);
    else
        fprintf(f, "%.3f", (double)bytes / (double)MIB_BYTES);
}

/* ---- Text. ---- */

static void text_limits(FILE *f, const struct egpu__vcuda_report *r)
{
    const struct egpu__vcuda_config *cfg = r->cfg;
    char u[EGPU_VCUDA_UUID_STR_MAX];

    fprintf(f, "dir       %s\nregions   %s\n", r->dir, r->region_dir);
    if (cfg == NULL || cfg->source == EGPU_VCUDA_SRC_NONE) {
        fprintf(f, "limits    none (no vcuda.conf)\n");
        return;
    }
    fprintf(f, "limits    %s: memory ", r->conf_path ? r->conf_path : "environment");
    if (cfg->has_memory)
        fprintf(f, "%" PRIu64 " MiB per card", cfg->memory_mib);
    else
        fprintf(f, "unlimited");
    if (cfg->has_core)
        fprintf(f, ", core %u%%, core limit %u%%", cfg->core_pct, cfg->core_limit_pct);
    else
        fprintf(f, ", core unlimited");
    fprintf(f, ", context extra %" PRIu64 " MiB\n", cfg->ctx_extra_mib);
    fprintf(f, "cards    ");
    if (cfg->ngpus == 0)
        fprintf(f, " every visible card");
    for (unsigned i = 0; i < cfg->ngpus && i < EGPU_VCUDA_MAX_CARDS; i++)
        fprintf(f, " %s", egpu__vcuda_uuid_format(&cfg->gpus[i], u));
    fprintf(f, "\n");
}

static void text_memory(FILE *f, const struct egpu__vcuda_report *r)
{
    const struct egpu__vcuda_region_view *m = r->mem;
    char u[EGPU_VCUDA_UUID_STR_MAX];
    unsigned live;

    fprintf(f, "\nmemory    %s\n", r->mem_path);
    if (m == NULL) {
        fprintf(f, "  no region (no process of the container has used a limited card)\n");
        return;
    }
    live = live_count(r);
    fprintf(f, "  generation %" PRIu64 ", lock %s", m->generation,
            m->lock ? "held by pid" : "free");
    if (m->lock)
        fprintf(f, " %" PRIu64, m->lock >> 32);
    fprintf(f, ", %u process slot%s: %u live, %u dead\n", m->nslots, m->nslots == 1 ? "" : "s",
            live, m->nslots - live);
    for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++) {
        const struct egpu__vcuda_region_view_card *card = &m->cards[c];

        if (!card->in_use)
            continue;
        fprintf(f, "  card %s  limit ", egpu__vcuda_uuid_format(&card->uuid, u));
        if (has_memory_limit(r, &card->uuid))
            fprintf(f, "%" PRIu64 " MiB", r->cfg->memory_mib);
        else
            fprintf(f, "none");
        fprintf(f, "  used ");
        print_mib(f, live_bytes(r, c));
        fprintf(f, " MiB  (recorded total ");
        print_mib(f, card->total_bytes);
        fprintf(f, " MiB)\n");
        for (unsigned i = 0; i < m->nslots && i < EGPU_VCUDA_REGION_SLOTS; i++) {
            const struct egpu__vcuda_region_view_slot *sl = &m->slots[i];

            if (sl->bytes[c] == 0)
                continue;
            fprintf(f, "    pid %-8" PRId32 " ", sl->pid);
            print_mib(f, sl->bytes[c]);
            fprintf(f, " MiB");
            if (r->host_pid[i] != 0 && r->host_pid[i] != sl->pid)
                fprintf(f, "  (pid %" PRId32 " on this node)", r->host_pid[i]);
            if (r->alive[i] != EGPU_VCUDA_ALIVE)
                fprintf(f, "  dead (reclaimed at the next allocation)");
            else if (!sl->confirmed)
                fprintf(f, "  unconfirmed");
            fprintf(f, "\n");
        }
    }
    for (unsigned i = 0; i < m->nslots && i < EGPU_VCUDA_REGION_SLOTS; i++) {
        if (r->alive[i] != EGPU_VCUDA_ALIVE)
            fprintf(f, "  dead slot %" PRIu32 ": pid %" PRId32 "\n", m->slots[i].index,
                    m->slots[i].pid);
    }
}

static void text_compute(FILE *f, const struct egpu__vcuda_report *r)
{
    const struct egpu__vcuda_core_view *k = r->core;
    char u[EGPU_VCUDA_UUID_STR_MAX];
    int n;

    fprintf(f, "\ncompute   %s\n", r->core_path);
    if (k == NULL) {
        fprintf(f, "  no region (no process of the container has launched under a compute "
                   "limit)\n");
        return;
    }
    fprintf(f, "  core ");
    if (has_core_limit(r))
        fprintf(f, "%u%%, limit %u%%", r->cfg->core_pct, r->cfg->core_limit_pct);
    else
        fprintf(f, "none");
    fprintf(f, "  (region made at core %" PRIu32 "%%, limit %" PRIu32 "%%)\n", k->core_pct,
            k->core_limit_pct);
    n = core_cards(r);
    for (int c = 0; c < n && c < EGPU_VCUDA_MAX_CARDS; c++) {
        const char *state = bucket_state(k->tat_ns[c], r->now_ns);
        bool listed =
            r->cfg != NULL && r->cfg->source != EGPU_VCUDA_SRC_NONE && (unsigned)c < r->cfg->ngpus;

        fprintf(f, "  card %d %s  bucket ", c,
                listed ? egpu__vcuda_uuid_format(&r->cfg->gpus[c], u) : "(uuid unknown)");
        if (strcmp(state, "unused") == 0)
            fprintf(f, "unused (never charged)");
        else if (strcmp(state, "idle") == 0)
            fprintf(f, "idle (%.3f ms behind now: whole burst available)",
                    -ms_from(k->tat_ns[c], r->now_ns));
        else
            fprintf(f, "%.3f ms ahead (%s)", ms_from(k->tat_ns[c], r->now_ns), state);
        if (k->queue_end_ns[c] > r->now_ns)
            fprintf(f, "  queued work ends in %.3f ms\n", ms_from(k->queue_end_ns[c], r->now_ns));
        else
            fprintf(f, "  no queued work\n");
    }
}

void egpu__vcuda_report_text(FILE *f, const struct egpu__vcuda_report *r)
{
    text_limits(f, r);
    text_memory(f, r);
    text_compute(f, r);
}

/* ---- JSON. ---- */

static void json_str(FILE *f, const char *s)
{
    if (s == NULL) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_uint_or_null(FILE *f, bool known, uint64_t v)
{
    if (known)
        fprintf(f, "%" PRIu64, v);
    else
        fputs("null", f);
}

static void json_config(FILE *f, const struct egpu__vcuda_report *r)
{
    const struct egpu__vcuda_config *cfg = r->cfg;
    bool set = cfg != NULL && cfg->source != EGPU_VCUDA_SRC_NONE;
    char u[EGPU_VCUDA_UUID_STR_MAX];

    fprintf(f, "  \"config\": {\"file\": ");
    json_str(f, r->conf_path);
    fprintf(f, ", \"gpus\": ");
    if (set && cfg->ngpus > 0) {
        fputc('[', f);
        for (unsigned i = 0; i < cfg->ngpus && i < EGPU_VCUDA_MAX_CARDS; i++)
            fprintf(f, "%s\"%s\"", i ? ", " : "", egpu__vcuda_uuid_format(&cfg->gpus[i], u));
        fputc(']', f);
    } else {
        fputs("null", f);
    }
    fprintf(f, ",\n             \"memory\": ");
    json_uint_or_null(f, set && cfg->has_memory, set ? cfg->memory_mib : 0);
    fprintf(f, ", \"core\": ");
    json_uint_or_null(f, set && cfg->has_core, set ? cfg->core_pct : 0);
    fprintf(f, ", \"coreLimit\": ");
    json_uint_or_null(f, set && cfg->has_core, set ? cfg->core_limit_pct : 0);
    fprintf(f, ", \"contextMib\": ");
    json_uint_or_null(f, set && cfg->has_context_mib, set ? cfg->context_mib : 0);
    fprintf(f, ", \"contextExtraMib\": ");
    json_uint_or_null(f, set, set ? cfg->ctx_extra_mib : 0);
    fprintf(f, "},\n");
}

static void json_mib(FILE *f, uint64_t bytes)
{
    print_mib(f, bytes);
}

static void json_memory(FILE *f, const struct egpu__vcuda_report *r)
{
    const struct egpu__vcuda_region_view *m = r->mem;
    char u[EGPU_VCUDA_UUID_STR_MAX];
    bool first = true;

    fprintf(f, "  \"memoryRegion\": {\"file\": ");
    json_str(f, r->mem_path);
    fprintf(f, ", \"present\": %s", m ? "true" : "false");
    if (m == NULL) {
        fprintf(f, ", \"generation\": null, \"lockHolder\": null, \"cards\": [], "
                   "\"processes\": []},\n");
        return;
    }
    /* a string: generations use all 64 bits, past what a JSON number keeps exactly */
    fprintf(f, ", \"generation\": \"%" PRIu64 "\", \"lockHolder\": ", m->generation);
    json_uint_or_null(f, m->lock != 0, m->lock >> 32);
    fprintf(f, ",\n    \"cards\": [");
    for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++) {
        const struct egpu__vcuda_region_view_card *card = &m->cards[c];
        bool pfirst = true;

        if (!card->in_use)
            continue;
        fprintf(f, "%s\n      {\"uuid\": \"%s\", \"limit\": ", first ? "" : ",",
                egpu__vcuda_uuid_format(&card->uuid, u));
        first = false;
        json_uint_or_null(f, has_memory_limit(r, &card->uuid),
                          has_memory_limit(r, &card->uuid) ? r->cfg->memory_mib : 0);
        fprintf(f, ", \"used\": ");
        json_mib(f, live_bytes(r, c));
        fprintf(f, ", \"recordedTotal\": ");
        json_mib(f, card->total_bytes);
        fprintf(f, ",\n       \"processes\": [");
        for (unsigned i = 0; i < m->nslots && i < EGPU_VCUDA_REGION_SLOTS; i++) {
            const struct egpu__vcuda_region_view_slot *sl = &m->slots[i];

            if (sl->bytes[c] == 0)
                continue;
            fprintf(f, "%s\n         {\"pid\": %" PRId32 ", \"memory\": ", pfirst ? "" : ",",
                    sl->pid);
            pfirst = false;
            json_mib(f, sl->bytes[c]);
            fprintf(f, ", \"bytes\": %" PRIu64 ", \"alive\": %s}", sl->bytes[c],
                    r->alive[i] == EGPU_VCUDA_ALIVE ? "true" : "false");
        }
        fprintf(f, "%s]}", pfirst ? "" : "\n       ");
    }
    fprintf(f, "%s],\n    \"processes\": [", first ? "" : "\n    ");
    for (unsigned i = 0; i < m->nslots && i < EGPU_VCUDA_REGION_SLOTS; i++) {
        const struct egpu__vcuda_region_view_slot *sl = &m->slots[i];

        fprintf(f, "%s\n      {\"slot\": %" PRIu32 ", \"pid\": %" PRId32 ", \"hostPid\": ",
                i ? "," : "", sl->index, sl->pid);
        json_uint_or_null(f, r->host_pid[i] > 0,
                          (uint64_t)(r->host_pid[i] > 0 ? r->host_pid[i] : 0));
        fprintf(f, ", \"startTicks\": ");
        json_uint_or_null(f, sl->start != 0, sl->start);
        fprintf(f, ", \"alive\": %s, \"confirmed\": %s}",
                r->alive[i] == EGPU_VCUDA_ALIVE ? "true" : "false",
                sl->confirmed ? "true" : "false");
    }
    fprintf(f, "%s]},\n", m->nslots ? "\n    " : "");
}

static void json_compute(FILE *f, const struct egpu__vcuda_report *r)
{
    const struct egpu__vcuda_core_view *k = r->core;
    char u[EGPU_VCUDA_UUID_STR_MAX];
    int n;

    fprintf(f, "  \"computeRegion\": {\"file\": ");
    json_str(f, r->core_path);
    fprintf(f, ", \"present\": %s", k ? "true" : "false");
    if (k == NULL) {
        fprintf(f,
                ", \"regionCore\": null, \"regionCoreLimit\": null, \"burstMs\": %.3f, "
                "\"cards\": []}\n",
                (double)EGPU_VCUDA_THROTTLE_TAU_NS / MS_NS);
        return;
    }
    fprintf(f,
            ", \"regionCore\": %" PRIu32 ", \"regionCoreLimit\": %" PRIu32
            ", \"burstMs\": %.3f,\n    \"cards\": [",
            k->core_pct, k->core_limit_pct, (double)EGPU_VCUDA_THROTTLE_TAU_NS / MS_NS);
    n = core_cards(r);
    for (int c = 0; c < n && c < EGPU_VCUDA_MAX_CARDS; c++) {
        bool listed =
            r->cfg != NULL && r->cfg->source != EGPU_VCUDA_SRC_NONE && (unsigned)c < r->cfg->ngpus;

        fprintf(f, "%s\n      {\"index\": %d, \"uuid\": ", c ? "," : "", c);
        if (listed)
            fprintf(f, "\"%s\"", egpu__vcuda_uuid_format(&r->cfg->gpus[c], u));
        else
            fputs("null", f);
        fprintf(f,
                ", \"state\": \"%s\", \"bucketAheadMs\": ", bucket_state(k->tat_ns[c], r->now_ns));
        if (k->tat_ns[c] != 0)
            fprintf(f, "%.3f", ms_from(k->tat_ns[c], r->now_ns));
        else
            fputs("null", f);
        fprintf(f, ", \"queueEndMs\": ");
        if (k->queue_end_ns[c] != 0)
            fprintf(f, "%.3f", ms_from(k->queue_end_ns[c], r->now_ns));
        else
            fputs("null", f);
        fputc('}', f);
    }
    fprintf(f, "%s]}\n", n > 0 ? "\n    " : "");
}

void egpu__vcuda_report_json(FILE *f, const struct egpu__vcuda_report *r)
{
    fprintf(f, "{\n  \"apiVersion\": \"%s\",\n  \"kind\": \"VcudaInspect\",\n",
            EGPU_VCUDA_INSPECT_API);
    fprintf(f, "  \"dir\": ");
    json_str(f, r->dir);
    fprintf(f, ",\n  \"regionDir\": ");
    json_str(f, r->region_dir);
    fprintf(f, ",\n");
    json_config(f, r);
    json_memory(f, r);
    json_compute(f, r);
    fprintf(f, "}\n");
}
