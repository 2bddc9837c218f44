/* tests/fuzz/fuzz_claims.c - the claim model's decoders (src/api/claim.c,
 * class.c, elasticgpu.c): objects anyone who may write a claim (a tenant) or
 * a class or an ElasticGPU sends through the API server to the controller.
 *
 * Input: byte 0 picks the decoder (mod 3: ElasticGPUClaim, ElasticGPUClass,
 * ElasticGPU), the rest is the object's JSON.
 *
 * Invariants: a refused object gets EGPU_ESYNTAX or EGPU_ERANGE with a
 * message and *out untouched; a decoded object encodes, its JSON text parses
 * and decodes to the same struct (memcmp), so what the controller writes
 * back is what it read; a class's node selector formats to text that parses
 * to the same selector; fit and best fit of a decoded ElasticGPU against
 * fixed claims answer a known reason and agree with each other; nothing
 * leaks.
 */
#include "fuzz.h"
#include "egpu/api.h"

union obj {
    struct egpu_api_claim claim;
    struct egpu_api_class cls;
    struct egpu_api_egpu egpu;
};

static int decode(int k, const json_t *o, union obj *out, struct egpu_error *err)
{
    if (k == 0)
        return egpu_api_claim_decode(o, &out->claim, err);
    if (k == 1)
        return egpu_api_class_decode(o, &out->cls, err);
    return egpu_api_egpu_decode(o, &out->egpu, err);
}

static json_t *encode(int k, const union obj *x)
{
    if (k == 0)
        return egpu_api_claim_encode(&x->claim);
    if (k == 1)
        return egpu_api_class_encode(&x->cls);
    return egpu_api_egpu_encode(&x->egpu);
}

static size_t size_of(int k)
{
    return k == 0   ? sizeof(struct egpu_api_claim)
           : k == 1 ? sizeof(struct egpu_api_class)
                    : sizeof(struct egpu_api_egpu);
}

static void check_selector(const struct egpu_api_class *c)
{
    struct egpu_api_selector again;
    struct egpu_error err = {0};
    char text[8192];

    if (!c->has_node_selector)
        return;
    FUZZ_CHECK(egpu_api_selector_format(&c->node_selector, text, sizeof(text)) < sizeof(text));
    memset(&again, 0, sizeof(again));
    FUZZ_CHECK(egpu_api_selector_parse(text, "s", &again, &err) == 0);
    FUZZ_CHECK(memcmp(&again, &c->node_selector, sizeof(again)) == 0);
    (void)egpu_api_selector_matches(&c->node_selector, NULL);
    (void)egpu_api_class_allows_model(c, "NVIDIA A100-SXM4-80GB");
    (void)egpu_api_class_peak(c, "NVIDIA A100-SXM4-80GB");
}

static void check_fit(const struct egpu_api_egpu *e)
{
    static struct egpu_api_claim claims[3];
    static struct egpu_api_class cls;
    const struct egpu_api_egpu *list[1] = {e};

    if (claims[0].meta.name[0] == '\0') {
        for (int i = 0; i < 3; i++) {
            snprintf(claims[i].meta.ns, sizeof(claims[i].meta.ns), "ml");
            snprintf(claims[i].meta.name, sizeof(claims[i].meta.name), "train");
            snprintf(claims[i].class_name, sizeof(claims[i].class_name), "fast");
        }
        claims[0].core_pct = 30;
        claims[0].has_mem = true;
        claims[0].mem_mib = 1024;
        claims[1].core_pct = 200;
        claims[2].tflops_milli = 19500;
        cls.npeaks = 1;
        snprintf(cls.peaks[0].model, sizeof(cls.peaks[0].model), "T4");
        cls.peaks[0].tflops_milli = 65000;
    }
    for (int i = 0; i < 3; i++) {
        int64_t core = -1;
        enum egpu_api_fit f = egpu_api_egpu_fit(e, &claims[i], &cls, "NVIDIA T4", &core);
        const char *const model = "NVIDIA T4";

        FUZZ_CHECK(f <= EGPU_API_FIT_MEMORY);
        FUZZ_CHECK(strcmp(egpu_api_fit_name(f), "unknown") != 0);
        FUZZ_CHECK(f != EGPU_API_FIT_OK || (core >= 1 && core <= e->core_pct));
        FUZZ_CHECK(egpu_api_best_fit(list, &model, 1, &claims[i], &cls) ==
                   (f == EGPU_API_FIT_OK ? 0 : -1));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static union obj x, y;
    struct egpu_error err = {0};
    long live = egpu_alloc_live();
    json_t *o, *enc, *back;
    char *text;
    int k, rc;

    if (size < 1)
        return 0;
    k = data[0] % 3;
    o = json_loadb((const char *)data + 1, size - 1, JSON_ALLOW_NUL, NULL);
    if (o == NULL)
        return 0;
    memset(&x, 0x5a, sizeof(x));
    rc = decode(k, o, &x, &err);
    if (rc != 0) {
        const unsigned char *p = (const unsigned char *)&x;

        FUZZ_CHECK(rc == EGPU_ESYNTAX || rc == EGPU_ERANGE);
        FUZZ_CHECK(err.msg[0] != '\0' && memchr(err.msg, '\0', sizeof(err.msg)) != NULL);
        for (size_t i = 0; i < size_of(k); i++)
            FUZZ_CHECK(p[i] == 0x5a);
    } else {
        enc = encode(k, &x);
        FUZZ_CHECK(enc != NULL);
        text = json_dumps(enc, JSON_COMPACT);
        FUZZ_CHECK(text != NULL);
        back = json_loads(text, 0, NULL);
        FUZZ_CHECK(back != NULL);
        memset(&y, 0, sizeof(y));
        if (decode(k, back, &y, &err) != 0) {
            fprintf(stderr, "re-decoding %s: %s\n", text, err.msg);
            FUZZ_CHECK(0);
        }
        FUZZ_CHECK(memcmp(&x, &y, size_of(k)) == 0);
        if (k == 1)
            check_selector(&x.cls);
        if (k == 2)
            check_fit(&x.egpu);
        free(text);
        json_decref(back);
        json_decref(enc);
    }
    json_decref(o);
    FUZZ_CHECK(egpu_alloc_live() == live);
    return 0;
}
