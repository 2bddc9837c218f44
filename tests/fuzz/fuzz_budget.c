/* tests/fuzz/fuzz_budget.c - GPUBudget and metering (src/api/budget.c,
 * meter.c, time.c): a budget a namespace's owner writes, and pods whose
 * fields the controller meters.
 *
 * Input: byte 0 picks (mod 3) a GPUBudget, a Pod to meter (also read as
 * claim holds and as an ElasticGPU), or a time text;
 * the rest is the JSON object or the text.
 *
 * Invariants: a refused budget gets EGPU_ESYNTAX or EGPU_ERANGE with a
 * message and *out untouched; a decoded one encodes, its JSON text parses
 * and decodes to the same struct (memcmp), its period ordered and used
 * never negative; a metered pod reads sane numbers, and the usage of any
 * window split in two is the sum of the halves; a time that parses formats
 * to text that parses to the same second; nothing leaks.
 */
#include "fuzz.h"
#include "egpu/api.h"

static void budget(const json_t *o)
{
    static struct egpu_api_budget x, y;
    struct egpu_error err = {0};
    json_t *enc, *back;
    char *text;
    int rc;

    memset(&x, 0x5a, sizeof(x));
    rc = egpu_api_budget_decode(o, &x, &err);
    if (rc != 0) {
        const unsigned char *p = (const unsigned char *)&x;

        FUZZ_CHECK(rc == EGPU_ESYNTAX || rc == EGPU_ERANGE);
        FUZZ_CHECK(err.msg[0] != '\0' && memchr(err.msg, '\0', sizeof(err.msg)) != NULL);
        for (size_t i = 0; i < sizeof(x); i++)
            FUZZ_CHECK(p[i] == 0x5a);
        return;
    }
    FUZZ_CHECK(!x.has_period || x.period_start_s < x.period_end_s);
    FUZZ_CHECK(egpu_api_budget_used_milli(&x) >= 0);
    FUZZ_CHECK(x.period != EGPU_API_PERIOD_DURATION ||
               (x.period_s >= EGPU_API_PERIOD_MIN_S && x.period_s <= EGPU_API_PERIOD_MAX_S));
    (void)egpu_api_budget_state_of(&x);
    enc = egpu_api_budget_encode(&x);
    FUZZ_CHECK(enc != NULL);
    text = json_dumps(enc, JSON_COMPACT);
    FUZZ_CHECK(text != NULL);
    back = json_loads(text, 0, NULL);
    FUZZ_CHECK(back != NULL);
    memset(&y, 0, sizeof(y));
    if (egpu_api_budget_decode(back, &y, &err) != 0) {
        fprintf(stderr, "re-decoding %s: %s\n", text, err.msg);
        FUZZ_CHECK(0);
    }
    FUZZ_CHECK(memcmp(&x, &y, sizeof(x)) == 0);
    free(text);
    json_decref(back);
    json_decref(enc);
}

static void pod(const json_t *o)
{
    struct egpu_api_meter_pod p = {0};
    struct egpu_error err = {0};
    int64_t c1 = 0, m1 = 0, c2 = 0, m2 = 0, from, mid, to;
    int rc = egpu_api_meter_pod_read(o, &p, &err);

    if (rc != 0) {
        FUZZ_CHECK(err.msg[0] != '\0');
        return;
    }
    FUZZ_CHECK(p.core_pct >= 0 && p.mem_mib >= 0 && p.start_s >= 0);
    from = p.start_s > 1000 ? p.start_s - 1000 : 0;
    mid = from + 1234;
    to = from + 86400 * 400LL;
    egpu_api_meter_add(&p, from, to, &c1, &m1);
    egpu_api_meter_add(&p, from, mid, &c2, &m2);
    egpu_api_meter_add(&p, mid, to, &c2, &m2);
    FUZZ_CHECK(c1 == c2 && m1 == m2 && c1 >= 0 && m1 >= 0);
}

/* The same object read as a pod's claim holds and as an ElasticGPU's: the
 * charge of the holds is additive over a cut, never negative. */
static void holds(const json_t *o)
{
    struct egpu_api_meter_hold h[EGPU_API_POD_CLAIMS_MAX + 1];
    struct egpu_error err = {0};
    int64_t c1 = 0, m1 = 0, c2 = 0, m2 = 0, from = 0, mid, to;
    size_t n = 0;

    if (egpu_api_meter_pod_holds(o, h, EGPU_API_POD_CLAIMS_MAX, &n, &err) != 0)
        n = 0;
    if (egpu_api_meter_egpu_read(o, 0, &h[n], &err) == 0)
        n++;
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(h[i].m.core_pct >= 0 && h[i].m.mem_mib >= 0 && h[i].m.start_s >= 0);
        if (h[i].m.start_s > 1000 && (from == 0 || h[i].m.start_s - 1000 < from))
            from = h[i].m.start_s - 1000;
    }
    mid = from + 1234;
    to = from + 86400 * 400LL;
    FUZZ_CHECK(egpu_api_meter_holds_add(h, n, from, to, &c1, &m1) == 0);
    FUZZ_CHECK(egpu_api_meter_holds_add(h, n, from, mid, &c2, &m2) == 0);
    FUZZ_CHECK(egpu_api_meter_holds_add(h, n, mid, to, &c2, &m2) == 0);
    FUZZ_CHECK(c1 == c2 && m1 == m2 && c1 >= 0 && m1 >= 0);
}

static void time_text(const uint8_t *data, size_t size)
{
    char text[128], buf[EGPU_API_TIME_MAX];
    int64_t s, again;

    if (size >= sizeof(text))
        return;
    memcpy(text, data, size);
    text[size] = '\0';
    if (egpu_api_time_parse(text, "t", &s, NULL) != 0)
        return;
    FUZZ_CHECK(s >= 0);
    FUZZ_CHECK(egpu_api_time_parse(egpu_api_time_format(s, buf), "t", &again, NULL) == 0);
    FUZZ_CHECK(again == s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    long live = egpu_alloc_live();
    json_t *o;
    int k;

    if (size < 1)
        return 0;
    k = data[0] % 3;
    if (k == 2) {
        time_text(data + 1, size - 1);
        return 0;
    }
    o = json_loadb((const char *)data + 1, size - 1, JSON_ALLOW_NUL, NULL);
    if (o == NULL)
        return 0;
    if (k == 0)
        budget(o);
    else {
        pod(o);
        holds(o);
    }
    json_decref(o);
    FUZZ_CHECK(egpu_alloc_live() == live);
    return 0;
}
