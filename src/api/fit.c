/* api/fit.c - which ElasticGPU a claim binds to, and what TFLOPS come to.
 *
 * The controller binds as the PersistentVolume controller does: a claim
 * naming an ElasticGPU binds to it when it fits; a claim naming none binds to
 * the Available ElasticGPU of its class that fits best, else one is
 * provisioned. These are the pure parts: whether one fits (and why not, for
 * the claim's events), which of several fits best, and the core percent of a
 * card that a TFLOPS claim needs.
 *
 * Best means least left over: gpu-core first (percent points stay idle on
 * the card otherwise), then gpu-memory, then the name, so every controller
 * replica and every restart picks the same one.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "objects_int.h"

static const char *const fit_names[] = {"fits", "deleting", "taken",  "phase", "class",
                                        "kind", "model",    "tflops", "core",  "memory"};

const char *egpu_api_fit_name(enum egpu_api_fit f)
{
    return (unsigned)f < sizeof(fit_names) / sizeof(fit_names[0]) ? fit_names[f] : "unknown";
}

int egpu_api_tflops_to_core(int64_t tflops_milli, int64_t peak_milli, int64_t *core_pct,
                            struct egpu_error *err)
{
    char t[32], p[32], most[32];
    int64_t pct;

    if (tflops_milli <= 0 || peak_milli <= 0 || tflops_milli > 1000LL * EGPU_API_TFLOPS_MAX ||
        peak_milli > 1000LL * EGPU_API_TFLOPS_MAX)
        return egpu_error_set(err, EGPU_ERANGE,
                              EGPU_RES_GPU_TFLOPS " %s on a card of %s TFLOPS; allowed: both "
                                                  "above 0 and at most 1000000",
                              egpu__api_milli_text(tflops_milli, t, sizeof(t)),
                              egpu__api_milli_text(peak_milli, p, sizeof(p)));
    /* Both at most 10^9: 100 * tflops fits int64 easily. */
    pct = (100 * tflops_milli + peak_milli - 1) / peak_milli;
    if (pct > 99)
        return egpu_error_set(err, EGPU_ERANGE,
                              EGPU_RES_GPU_TFLOPS
                              " %s is %" PRId64 "%% of a card of %s "
                              "TFLOPS; allowed: at most 99%% of one card, %s TFLOPS",
                              egpu__api_milli_text(tflops_milli, t, sizeof(t)), pct,
                              egpu__api_milli_text(peak_milli, p, sizeof(p)),
                              egpu__api_milli_text(peak_milli * 99 / 100, most, sizeof(most)));
    *core_pct = pct;
    return 0;
}

/* Is e's claimRef this claim (namespace and name; the uid too when both
 * have one)? */
static bool ref_is(const struct egpu_api_egpu *e, const struct egpu_api_claim *c)
{
    return strcmp(e->claim_ns, c->meta.ns) == 0 && strcmp(e->claim_name, c->meta.name) == 0 &&
           (e->claim_uid[0] == '\0' || c->meta.uid[0] == '\0' ||
            strcmp(e->claim_uid, c->meta.uid) == 0);
}

/* Was e made for this very claim: its claimRef carries the claim's uid (a
 * provisioned ElasticGPU, Pending until its binding writes Bound, or a
 * binding a restart finishes)? */
static bool made_for(const struct egpu_api_egpu *e, const struct egpu_api_claim *c)
{
    return e->has_claim_ref && e->claim_uid[0] != '\0' && strcmp(e->claim_uid, c->meta.uid) == 0;
}

enum egpu_api_fit egpu_api_egpu_fit(const struct egpu_api_egpu *e, const struct egpu_api_claim *c,
                                    const struct egpu_api_class *cls, const char *model,
                                    int64_t *core_pct)
{
    enum egpu_api_provisioner kind;
    int64_t need = c->core_pct;

    if (model != NULL && model[0] == '\0')
        model = NULL;
    if (e->meta.deletion_timestamp[0] != '\0')
        return EGPU_API_FIT_DELETING;
    if (e->has_claim_ref ? !ref_is(e, c) : e->phase == EGPU_API_EGPU_BOUND)
        return EGPU_API_FIT_TAKEN;
    if (e->phase != EGPU_API_EGPU_AVAILABLE && e->phase != EGPU_API_EGPU_BOUND &&
        !(e->phase == EGPU_API_EGPU_PENDING && made_for(e, c)))
        return EGPU_API_FIT_PHASE;
    if (strcmp(e->class_name, c->class_name) != 0)
        return EGPU_API_FIT_CLASS;
    kind = c->core_pct >= 100 ? EGPU_API_PROVISIONER_PHYSICAL : EGPU_API_PROVISIONER_GPUSHARE;
    if (e->source != kind || (cls != NULL && cls->provisioner != kind))
        return EGPU_API_FIT_KIND;
    if (cls != NULL && model != NULL && !egpu_api_class_allows_model(cls, model))
        return EGPU_API_FIT_MODEL;
    if (c->tflops_milli > 0) {
        struct egpu_error err = {0};
        int64_t peak = cls != NULL ? egpu_api_class_peak(cls, model) : 0;

        if (peak == 0)
            return EGPU_API_FIT_MODEL;
        if (egpu_api_tflops_to_core(c->tflops_milli, peak, &need, &err) != 0)
            return EGPU_API_FIT_TFLOPS;
    }
    if (e->core_pct < need)
        return EGPU_API_FIT_CORE;
    if (c->has_mem && (!e->has_mem || e->mem_mib < c->mem_mib))
        return EGPU_API_FIT_MEMORY;
    if (core_pct != NULL)
        *core_pct = need;
    return EGPU_API_FIT_OK;
}

long egpu_api_best_fit(const struct egpu_api_egpu *const *egpus, const char *const *models,
                       size_t n, const struct egpu_api_claim *c, const struct egpu_api_class *cls)
{
    long best = -1;
    int64_t best_core = 0, best_mem = 0;

    for (size_t i = 0; i < n; i++) {
        const struct egpu_api_egpu *e = egpus[i];
        int64_t need, left_core, left_mem;

        if (e == NULL || egpu_api_egpu_fit(e, c, cls, models != NULL ? models[i] : NULL, &need) !=
                             EGPU_API_FIT_OK)
            continue;
        left_core = e->core_pct - need;
        left_mem = c->has_mem ? e->mem_mib - c->mem_mib : (e->has_mem ? e->mem_mib : 0);
        if (best < 0 || left_core < best_core ||
            (left_core == best_core &&
             (left_mem < best_mem ||
              (left_mem == best_mem && strcmp(e->meta.name, egpus[best]->meta.name) < 0)))) {
            best = (long)i;
            best_core = left_core;
            best_mem = left_mem;
        }
    }
    return best;
}
