/* tests/unit/test_api_claims.c - the claim model's objects (src/api/claim.c,
 * class.c, elasticgpu.c, fit.c): one table row per rule, each an object in
 * and the exact message out; every good object rendered and read back to
 * the same struct; label selectors, fit, best fit and TFLOPS as tables.
 *
 * Objects are written with ' for " (tu_json() swaps them) to stay readable. */
#include "testutil.h"
#include "testjson.h"

#include <errno.h>
#include <jansson.h>

#include "egpu/api.h"

enum kind { CLAIM, CLASS, EGPU };

union any {
    struct egpu_api_claim claim;
    struct egpu_api_class cls;
    struct egpu_api_egpu egpu;
};

static int decode(enum kind k, const json_t *o, union any *out, struct egpu_error *err)
{
    switch (k) {
    case CLAIM:
        return egpu_api_claim_decode(o, &out->claim, err);
    case CLASS:
        return egpu_api_class_decode(o, &out->cls, err);
    default:
        return egpu_api_egpu_decode(o, &out->egpu, err);
    }
}

static json_t *encode(enum kind k, const union any *x)
{
    switch (k) {
    case CLAIM:
        return egpu_api_claim_encode(&x->claim);
    case CLASS:
        return egpu_api_class_encode(&x->cls);
    default:
        return egpu_api_egpu_encode(&x->egpu);
    }
}

static size_t size_of(enum kind k)
{
    return k == CLAIM   ? sizeof(struct egpu_api_claim)
           : k == CLASS ? sizeof(struct egpu_api_class)
                        : sizeof(struct egpu_api_egpu);
}

/* Decode text; on success also check decode(encode(x)) == x and that a
 * failed decode leaves *out alone. Returns the message ("" when it decodes). */
static void check(enum kind k, const char *what, const char *text, const char *want, int code)
{
    static union any x, y;
    struct egpu_error err = {0};
    json_t *o = tu_json(text), *again;
    long live = egpu_alloc_live();
    int rc;

    memset(&x, 0xa5, sizeof(x));
    rc = decode(k, o, &x, &err);
    if (strcmp(err.msg, want) != 0 || (want[0] == '\0') != (rc == 0))
        fail_msg("%s: got rc %d \"%s\"\n  want \"%s\"", what, rc, err.msg, want);
    if (rc != 0) {
        unsigned char *p = (unsigned char *)&x;

        assert_int_equal(rc, code);
        for (size_t i = 0; i < size_of(k); i++)
            assert_int_equal(p[i], 0xa5);
    } else {
        again = encode(k, &x);
        assert_non_null(again);
        memset(&y, 0, sizeof(y));
        if (decode(k, again, &y, &err) != 0)
            fail_msg("%s: the encoded object does not decode: %s", what, err.msg);
        if (memcmp(&x, &y, size_of(k)) != 0) {
            char *s = json_dumps(again, JSON_COMPACT);

            fail_msg("%s: decode(encode(x)) != x; encoded: %s", what, s);
        }
        json_decref(again);
    }
    assert_int_equal(egpu_alloc_live(), live);
    json_decref(o);
}

struct row {
    const char *what, *text, *want;
    int code;
};

#define HEAD(kind) "'apiVersion':'elasticgpu.io/v1alpha1','kind':'" kind "'"
#define CLAIM_META "'metadata':{'name':'train','namespace':'ml'}"
#define CLAIM_REQ(req, rest)                                                                      \
    "{" HEAD("ElasticGPUClaim") "," CLAIM_META ",'spec':{'resources':{'requests':{" req "}}" rest \
                                "}}"
#define CLAIM_ST(st)                                                                               \
    "{" HEAD("ElasticGPUClaim") "," CLAIM_META ",'spec':{'resources':{'requests':{'elasticgpu.io/" \
                                "gpu-core':30}}},'status':" st "}"
#define CORE_ALLOWED "allowed: 1..99 to share one card, or a multiple of 100 for whole cards"
#define COND(extra)                                                                                \
    "{'type':'Bound','status':'True','lastTransitionTime':'2026-07-24T09:31:03Z','reason':'Bound'" \
    ",'message':''" extra "}"

static void test_claim_rules(void **state)
{
    static const struct row rows[] = {
        {"share", CLAIM_REQ("'elasticgpu.io/gpu-core':30,'elasticgpu.io/gpu-memory':4096", ""), "",
         0},
        {"whole cards", CLAIM_REQ("'elasticgpu.io/gpu-core':200", ",'elasticGPUClassName':'a100'"),
         "", 0},
        {"tflops", CLAIM_REQ("'elasticgpu.io/gpu-tflops':19.5,'elasticgpu.io/gpu-memory':1024", ""),
         "", 0},
        {"tflops whole", CLAIM_REQ("'elasticgpu.io/gpu-tflops':100", ",'elasticGPUName':'e1'"), "",
         0},
        {"tflops thousandth", CLAIM_REQ("'elasticgpu.io/gpu-tflops':0.001", ""), "", 0},
        {"full metadata and status",
         "{" HEAD(
             "ElasticGPUClaim") ",'metadata':{'name':'train','namespace':'ml','uid':'u-1',"
                                "'resourceVersion':'42','generation':3,'deletionTimestamp':'2026-"
                                "07-24T09:31:03Z',"
                                "'finalizers':['elasticgpu.io/claim-protection','x.io/"
                                "y'],'labels':{'a':'b'}},"
                                "'spec':{'resources':{'requests':{'elasticgpu.io/"
                                "gpu-core':30}},'elasticGPUName':'e1',"
                                "'elasticGPUClassName':'c'},'status':{'phase':'Bound','"
                                "elasticGPUName':'e1',"
                                "'capacity':{'elasticgpu.io/gpu-core':40,'elasticgpu.io/"
                                "gpu-memory':8192},"
                                "'observedGeneration':3,'conditions':[" COND(
                                    ",'observedGeneration':3") ","
                                                               "{'type':'Ready','status':'Unknown',"
                                                               "'lastTransitionTime':'t','reason':'"
                                                               "R','message':'m'}"
                                                               "]}}",
         "", 0},
        {"core 150", CLAIM_REQ("'elasticgpu.io/gpu-core':150", ""),
         "spec.resources.requests.elasticgpu.io/gpu-core is 150; " CORE_ALLOWED, EGPU_ERANGE},
        {"core 0", CLAIM_REQ("'elasticgpu.io/gpu-core':0", ""),
         "spec.resources.requests.elasticgpu.io/gpu-core is 0; " CORE_ALLOWED, EGPU_ERANGE},
        {"core 6500", CLAIM_REQ("'elasticgpu.io/gpu-core':6500", ""),
         "spec.resources.requests.elasticgpu.io/gpu-core is 6500; allowed: at most 64 whole cards "
         "(6400), the most one node may hold",
         EGPU_ERANGE},
        {"core text", CLAIM_REQ("'elasticgpu.io/gpu-core':'30'", ""),
         "spec.resources.requests.elasticgpu.io/gpu-core is \"30\"; " CORE_ALLOWED, EGPU_ESYNTAX},
        {"core real", CLAIM_REQ("'elasticgpu.io/gpu-core':30.5", ""),
         "spec.resources.requests.elasticgpu.io/gpu-core is 30.5; " CORE_ALLOWED, EGPU_ESYNTAX},
        {"both", CLAIM_REQ("'elasticgpu.io/gpu-core':30,'elasticgpu.io/gpu-tflops':10", ""),
         "spec.resources.requests has both elasticgpu.io/gpu-core and elasticgpu.io/gpu-tflops; "
         "allowed: exactly one of them",
         EGPU_ERANGE},
        {"neither", CLAIM_REQ("'elasticgpu.io/gpu-memory':1024", ""),
         "spec.resources.requests has neither elasticgpu.io/gpu-core nor "
         "elasticgpu.io/gpu-tflops; allowed: exactly one of them",
         EGPU_ERANGE},
        {"tflops 0", CLAIM_REQ("'elasticgpu.io/gpu-tflops':0", ""),
         "spec.resources.requests.elasticgpu.io/gpu-tflops is 0; allowed: a number of TFLOPS "
         "above 0 and at most 1000000, e.g. 19.5",
         EGPU_ERANGE},
        {"tflops too many", CLAIM_REQ("'elasticgpu.io/gpu-tflops':1000000.5", ""),
         "spec.resources.requests.elasticgpu.io/gpu-tflops is 1000000.5; allowed: a number of "
         "TFLOPS above 0 and at most 1000000, e.g. 19.5",
         EGPU_ERANGE},
        {"tflops text", CLAIM_REQ("'elasticgpu.io/gpu-tflops':'19.5'", ""),
         "spec.resources.requests.elasticgpu.io/gpu-tflops is \"19.5\"; allowed: a number of "
         "TFLOPS above 0 and at most 1000000, e.g. 19.5",
         EGPU_ESYNTAX},
        {"memory 0", CLAIM_REQ("'elasticgpu.io/gpu-core':30,'elasticgpu.io/gpu-memory':0", ""),
         "spec.resources.requests.elasticgpu.io/gpu-memory is 0; allowed: a whole number of MiB, "
         "1..4294967295, e.g. 4096",
         EGPU_ERANGE},
        {"memory on whole cards",
         CLAIM_REQ("'elasticgpu.io/gpu-core':100,'elasticgpu.io/gpu-memory':4096", ""),
         "spec.resources.requests.elasticgpu.io/gpu-memory is 4096 with elasticgpu.io/gpu-core "
         "100 (whole cards); allowed: no gpu-memory on whole cards, which come with all their "
         "memory",
         EGPU_ERANGE},
        {"no spec", "{" HEAD("ElasticGPUClaim") "," CLAIM_META "}", "spec is missing",
         EGPU_ESYNTAX},
        {"no requests", "{" HEAD("ElasticGPUClaim") "," CLAIM_META ",'spec':{'resources':{}}}",
         "spec.resources.requests is missing", EGPU_ESYNTAX},
        {"requests a list",
         "{" HEAD("ElasticGPUClaim") "," CLAIM_META ",'spec':{'resources':{'requests':[]}}}",
         "spec.resources.requests is []; allowed: an object", EGPU_ESYNTAX},
        {"no namespace",
         "{" HEAD("ElasticGPUClaim") ",'metadata':{'name':'x'},'spec':{'resources':{'requests':{"
                                     "'elasticgpu.io/gpu-core':30}}}}",
         "metadata.namespace is missing", EGPU_ESYNTAX},
        {"empty name",
         "{" HEAD("ElasticGPUClaim") ",'metadata':{'name':'','namespace':'ml'},'spec':{}}",
         "metadata.name is \"\"; allowed: non-empty text", EGPU_ESYNTAX},
        {"wrong kind", "{" HEAD("ElasticGPU") "," CLAIM_META "}",
         "kind is \"ElasticGPU\"; allowed: ElasticGPUClaim", EGPU_ERANGE},
        {"wrong version",
         "{'apiVersion':'elasticgpu.io/v1','kind':'ElasticGPUClaim'," CLAIM_META "}",
         "apiVersion is \"elasticgpu.io/v1\"; allowed: elasticgpu.io/v1alpha1", EGPU_ERANGE},
        {"not an object", "[]", "ElasticGPUClaim: the object must be a JSON object", EGPU_ESYNTAX},
        {"class name too long",
         CLAIM_REQ("'elasticgpu.io/gpu-core':30",
                   ",'elasticGPUClassName':'"
                   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                   "aaaaaaaaaaaaaaaaaaaaaaa'"),
         "spec.elasticGPUClassName is 254 bytes long; allowed: at most 253", EGPU_ESYNTAX},
        {"phase", CLAIM_ST("{'phase':'Done'}"),
         "status.phase is \"Done\"; allowed: Pending, Bound, Lost", EGPU_ERANGE},
        {"capacity core", CLAIM_ST("{'capacity':{'elasticgpu.io/gpu-core':150}}"),
         "status.capacity.elasticgpu.io/gpu-core is 150; " CORE_ALLOWED, EGPU_ERANGE},
        {"observedGeneration", CLAIM_ST("{'observedGeneration':-1}"),
         "status.observedGeneration is -1; allowed: a whole number from 0", EGPU_ERANGE},
        {"condition twice", CLAIM_ST("{'conditions':[" COND("") "," COND("") "]}"),
         "status.conditions[1].type is \"Bound\" again; allowed: one condition per type",
         EGPU_ERANGE},
        {"condition status",
         CLAIM_ST("{'conditions':[{'type':'Bound','status':'Yes','lastTransitionTime':'t',"
                  "'reason':'R','message':''}]}"),
         "status.conditions[0].status is \"Yes\"; allowed: True, False, Unknown", EGPU_ERANGE},
        {"condition without reason",
         CLAIM_ST("{'conditions':[{'type':'Bound','status':'True','lastTransitionTime':'t',"
                  "'message':''}]}"),
         "status.conditions[0].reason is missing", EGPU_ESYNTAX},
        {"nine conditions", CLAIM_ST("{'conditions':[{},{},{},{},{},{},{},{},{}]}"),
         "status.conditions has 9 entries; allowed: at most 8", EGPU_ESYNTAX},
        {"seventeen finalizers",
         "{" HEAD("ElasticGPUClaim") ",'metadata':{'name':'x','namespace':'ml','finalizers':["
                                     "'a','b','c','d','e','f','g','h','i','j','k','l','m','n','o','"
                                     "p','q']},'spec':{}}",
         "metadata.finalizers has 17 names; allowed: at most 16", EGPU_ESYNTAX},
        {"finalizer empty",
         "{" HEAD("ElasticGPUClaim") ",'metadata':{'name':'x','namespace':'ml','finalizers':"
                                     "['']},'spec':{}}",
         "metadata.finalizers[0] must be a name of 1..319 bytes", EGPU_ESYNTAX},
        {"generation",
         "{" HEAD("ElasticGPUClaim") ",'metadata':{'name':'x','namespace':'ml',"
                                     "'generation':'1'},'spec':{}}",
         "metadata.generation is \"1\"; allowed: a whole number from 0", EGPU_ESYNTAX},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        check(CLAIM, rows[i].what, rows[i].text, rows[i].want, rows[i].code);
}

static void test_claim_fields(void **state)
{
    struct egpu_api_claim c;
    struct egpu_error err = {0};
    json_t *o = tu_json(CLAIM_REQ("'elasticgpu.io/gpu-tflops':19.5,'elasticgpu.io/gpu-memory':1024",
                                  ",'elasticGPUClassName':'fast'")),
           *enc;
    json_t *up = tu_json(CLAIM_REQ("'elasticgpu.io/gpu-tflops':0.0001", ""));

    (void)state;
    assert_int_equal(egpu_api_claim_decode(o, &c, &err), 0);
    assert_string_equal(c.meta.ns, "ml");
    assert_string_equal(c.meta.name, "train");
    assert_int_equal(c.tflops_milli, 19500);
    assert_int_equal(c.core_pct, 0);
    assert_true(c.has_mem);
    assert_int_equal(c.mem_mib, 1024);
    assert_string_equal(c.class_name, "fast");
    assert_int_equal(c.phase, EGPU_API_CLAIM_PENDING); /* no status */
    enc = egpu_api_claim_encode(&c);
    assert_true(json_is_real(json_object_get(
        json_object_get(json_object_get(json_object_get(enc, "spec"), "resources"), "requests"),
        EGPU_RES_GPU_TFLOPS)));
    assert_string_equal(json_string_value(json_object_get(json_object_get(enc, "status"), "phase")),
                        "Pending");
    json_decref(enc);
    /* A ten-thousandth rounds up to a thousandth: a claim never gets less. */
    assert_int_equal(egpu_api_claim_decode(up, &c, &err), 0);
    assert_int_equal(c.tflops_milli, 1);
    assert_true(egpu_api_meta_has_finalizer(&c.meta, "x") == false);
    /* Out of memory is -ENOMEM, and nothing leaks. */
    egpu_alloc_fail_after(1);
    assert_int_equal(egpu_api_claim_decode(o, &c, &err), -ENOMEM);
    egpu_alloc_fail_after(0);
    json_decref(o);
    json_decref(up);
}

#define CLASS_OBJ(rest) "{" HEAD("ElasticGPUClass") ",'metadata':{'name':'fast'}" rest "}"
#define GPUSHARE        ",'provisioner':'gpushare.provisioner.elasticgpu.io'"
#define PARAMS(p)       CLASS_OBJ(GPUSHARE ",'parameters':{" p "}")
#define PEAK_ALLOWED                                                                      \
    "allowed: the card's peak TFLOPS, digits with up to 3 decimals, above 0 and at most " \
    "1000000, e.g. \"312\" or \"19.5\""

static void test_class_rules(void **state)
{
    static const struct row rows[] = {
        {"minimal", CLASS_OBJ(GPUSHARE), "", 0},
        {"everything",
         "{" HEAD("ElasticGPUClass") ",'metadata':{'name':'fast','uid':'u','resourceVersion':'7',"
                                     "'annotations':{'elasticgpu.io/is-default-class':'true'}},"
                                     "'provisioner':'physical.provisioner.elasticgpu.io','"
                                     "reclaimPolicy':'Retain',"
                                     "'bindingMode':'WaitForFirstConsumer','parameters':{'models':'"
                                     "NVIDIA A100-SXM4-80GB|H100',"
                                     "'nodeSelector':'zone = a, pool in ( x , y "
                                     "),!tainted,gpu,tier!=low,k==v,r notin (q)',"
                                     "'policy':'bestfit','tflops.A100-SXM4-80GB':'312','tflops."
                                     "NVIDIA H100':'989.5',"
                                     "'tflops.T4':'8.125'}}",
         "", 0},
        {"no provisioner", CLASS_OBJ(""), "provisioner is missing", EGPU_ESYNTAX},
        {"provisioner", CLASS_OBJ(",'provisioner':'kubernetes.io/gce-pd'"),
         "provisioner is \"kubernetes.io/gce-pd\"; allowed: gpushare.provisioner.elasticgpu.io, "
         "physical.provisioner.elasticgpu.io",
         EGPU_ERANGE},
        {"reclaimPolicy", CLASS_OBJ(GPUSHARE ",'reclaimPolicy':'Recycle'"),
         "reclaimPolicy is \"Recycle\"; allowed: Delete, Retain", EGPU_ERANGE},
        {"bindingMode", CLASS_OBJ(GPUSHARE ",'bindingMode':'Later'"),
         "bindingMode is \"Later\"; allowed: Immediate, WaitForFirstConsumer", EGPU_ERANGE},
        {"parameters a list", CLASS_OBJ(GPUSHARE ",'parameters':['a']"),
         "parameters is [\"a\"]; allowed: an object", EGPU_ESYNTAX},
        {"unknown parameter", PARAMS("'zone':'a'"),
         "parameters has \"zone\"; allowed: models, nodeSelector, policy, tflops.<model>",
         EGPU_ERANGE},
        {"tflops without a model", PARAMS("'tflops.':'1'"),
         "parameters has \"tflops.\"; allowed: models, nodeSelector, policy, tflops.<model>",
         EGPU_ERANGE},
        {"parameter not text", PARAMS("'policy':3"), "parameters[\"policy\"] is 3; allowed: text",
         EGPU_ESYNTAX},
        {"policy", PARAMS("'policy':'pack'"),
         "parameters.policy is \"pack\"; allowed: binpack, spread, best-fit, random, fgd, fgd-cpu, "
         "fgd-cpu-fill",
         EGPU_ERANGE},
        {"models", PARAMS("'models':'A||B'"),
         "parameters.models is \"A||B\"; allowed: card models separated by |, none empty, e.g. "
         "\"NVIDIA A100-SXM4-80GB|NVIDIA H100\"",
         EGPU_ERANGE},
        {"nodeSelector", PARAMS("'nodeSelector':'zone=a,'"),
         "parameters.nodeSelector is \"zone=a,\"; allowed: a label selector such as "
         "\"zone=a,pool in (x,y)\": requirements separated by commas, each key, !key, "
         "key=value, key!=value, key in (v1,v2) or key notin (v1,v2) (keys of at most 317 and "
         "values of at most 63 characters A-Z a-z 0-9 . _ -, up to 8 values in a set)",
         EGPU_ERANGE},
        {"peak text", PARAMS("'tflops.T4':'fast'"),
         "parameters[\"tflops.T4\"] is \"fast\"; " PEAK_ALLOWED, EGPU_ERANGE},
        {"peak 0", PARAMS("'tflops.T4':'0.000'"),
         "parameters[\"tflops.T4\"] is \"0.000\"; " PEAK_ALLOWED, EGPU_ERANGE},
        {"peak 4 decimals", PARAMS("'tflops.T4':'8.1234'"),
         "parameters[\"tflops.T4\"] is \"8.1234\"; " PEAK_ALLOWED, EGPU_ERANGE},
        {"peak too high", PARAMS("'tflops.T4':'1000001'"),
         "parameters[\"tflops.T4\"] is \"1000001\"; " PEAK_ALLOWED, EGPU_ERANGE},
        {"peak quantity", PARAMS("'tflops.T4':'8k'"),
         "parameters[\"tflops.T4\"] is \"8k\"; " PEAK_ALLOWED, EGPU_ERANGE},
        {"seventeen peaks",
         PARAMS("'tflops.a':'1','tflops.b':'1','tflops.c':'1','tflops.d':'1','tflops.e':'1',"
                "'tflops.f':'1','tflops.g':'1','tflops.h':'1','tflops.i':'1','tflops.j':'1',"
                "'tflops.k':'1','tflops.l':'1','tflops.m':'1','tflops.n':'1','tflops.o':'1',"
                "'tflops.p':'1','tflops.q':'1'"),
         "parameters has more than 16 tflops.<model> entries; allowed: at most 16", EGPU_ERANGE},
        {"annotations a list",
         "{" HEAD("ElasticGPUClass") ",'metadata':{'name':'x','annotations':[]}" GPUSHARE "}",
         "metadata.annotations is []; allowed: an object", EGPU_ESYNTAX},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        check(CLASS, rows[i].what, rows[i].text, rows[i].want, rows[i].code);
}

static void test_class_fields(void **state)
{
    struct egpu_api_class c;
    struct egpu_error err = {0};
    json_t *min = tu_json(CLASS_OBJ(GPUSHARE)), *enc;
    json_t *notdef = tu_json(
        "{" HEAD("ElasticGPUClass") ",'metadata':{'name':'x','annotations':{"
                                    "'elasticgpu.io/is-default-class':'True'}}" GPUSHARE "}");
    json_t *full = tu_json(PARAMS("'models':'A100-SXM4-80GB|T4','tflops.A100-SXM4-80GB':'312',"
                                  "'tflops.NVIDIA A100-SXM4-80GB':'300','tflops.T4':'8.1',"
                                  "'policy':'spread','nodeSelector':'k==v'"));

    (void)state;
    /* StorageClass's defaults: Delete, Immediate, not the default class. */
    assert_int_equal(egpu_api_class_decode(min, &c, &err), 0);
    assert_int_equal(c.provisioner, EGPU_API_PROVISIONER_GPUSHARE);
    assert_int_equal(c.reclaim_policy, EGPU_API_RECLAIM_DELETE);
    assert_int_equal(c.binding_mode, EGPU_API_BINDING_IMMEDIATE);
    assert_false(c.is_default);
    assert_false(c.has_policy);
    assert_false(c.has_node_selector);
    enc = egpu_api_class_encode(&c);
    assert_string_equal(json_string_value(json_object_get(enc, "reclaimPolicy")), "Delete");
    assert_string_equal(json_string_value(json_object_get(enc, "bindingMode")), "Immediate");
    assert_null(json_object_get(enc, "parameters"));
    json_decref(enc);
    /* Only "true" makes a default class, as with StorageClass. */
    assert_int_equal(egpu_api_class_decode(notdef, &c, &err), 0);
    assert_false(c.is_default);
    assert_int_equal(egpu_api_class_decode(full, &c, &err), 0);
    assert_true(c.has_policy);
    assert_int_equal(c.policy, EGPU_POLICY_SPREAD);
    assert_int_equal(c.npeaks, 3);
    /* An exact model name wins; else the name without "NVIDIA ". */
    assert_int_equal(egpu_api_class_peak(&c, "NVIDIA A100-SXM4-80GB"), 300000);
    assert_int_equal(egpu_api_class_peak(&c, "A100-SXM4-80GB"), 312000);
    assert_int_equal(egpu_api_class_peak(&c, "NVIDIA T4"), 8100);
    assert_int_equal(egpu_api_class_peak(&c, "Tesla T4"), 0);
    assert_int_equal(egpu_api_class_peak(&c, NULL), 0);
    assert_true(egpu_api_class_allows_model(&c, "NVIDIA A100-SXM4-80GB"));
    assert_true(egpu_api_class_allows_model(&c, "T4"));
    assert_false(egpu_api_class_allows_model(&c, "NVIDIA H100"));
    assert_false(egpu_api_class_allows_model(&c, "A100"));
    enc = egpu_api_class_encode(&c);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(enc, "parameters"), "nodeSelector")),
        "k=v");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(enc, "parameters"), "tflops.T4")), "8.1");
    json_decref(enc);
    json_decref(min);
    json_decref(notdef);
    json_decref(full);
}

struct sel_row {
    const char *text, *canon;       /* canon NULL: refused */
    const char *labels, *no_labels; /* one that matches, one that does not */
};

static void test_selectors(void **state)
{
    static const struct sel_row rows[] = {
        {"", "", "{}", NULL},
        {"zone=a", "zone=a", "{'zone':'a'}", "{'zone':'b'}"},
        {" zone == a ", "zone=a", "{'zone':'a'}", "{}"},
        {"zone!=a", "zone!=a", "{}", "{'zone':'a'}"},
        {"zone=", "zone=", "{'zone':''}", "{'zone':'a'}"},
        {"pool in (x, y)", "pool in (x,y)", "{'pool':'y'}", "{'pool':'z'}"},
        {"pool notin(x)", "pool notin (x)", "{'pool':'y'}", "{'pool':'x'}"},
        {"gpu,!tainted", "gpu,!tainted", "{'gpu':'1'}", "{'gpu':'1','tainted':'x'}"},
        {"example.com/pool=a", "example.com/pool=a", "{'example.com/pool':'a'}", "{'pool':'a'}"},
        {"a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8", "a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8",
         "{'a':'1','b':'2','c':'3','d':'4','e':'5','f':'6','g':'7','h':'8'}", "{}"},
        {"a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9", NULL, NULL, NULL},
        {"k in (1,2,3,4,5,6,7,8,9)", NULL, NULL, NULL},
        {"k in ()", NULL, NULL, NULL},
        {"k in (a", NULL, NULL, NULL},
        {"k=a/b", NULL, NULL, NULL},
        {",k", NULL, NULL, NULL},
        {"k,", NULL, NULL, NULL},
        {"k==", "k=", "{'k':''}", "{}"},
        {"k=a b", NULL, NULL, NULL},
        {"!", NULL, NULL, NULL},
        {"k >= 3", NULL, NULL, NULL},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct egpu_api_selector s, again;
        struct egpu_error err = {0};
        char buf[EGPU_API_SELECTOR_TEXT_MAX];
        int rc = egpu_api_selector_parse(rows[i].text, "nodeSelector", &s, &err);

        if (rows[i].canon == NULL) {
            if (rc != EGPU_ERANGE)
                fail_msg("\"%s\" was not refused", rows[i].text);
            assert_non_null(strstr(err.msg, "nodeSelector is \""));
            continue;
        }
        if (rc != 0)
            fail_msg("\"%s\": %s", rows[i].text, err.msg);
        assert_int_equal(egpu_api_selector_format(&s, buf, sizeof(buf)), strlen(rows[i].canon));
        assert_string_equal(buf, rows[i].canon);
        memset(&again, 0, sizeof(again));
        assert_int_equal(egpu_api_selector_parse(buf, "x", &again, &err), 0);
        assert_memory_equal(&s, &again, sizeof(s));
        {
            json_t *yes = tu_json(rows[i].labels),
                   *no = rows[i].no_labels ? tu_json(rows[i].no_labels) : NULL;

            if (!egpu_api_selector_matches(&s, yes))
                fail_msg("\"%s\" does not match %s", rows[i].text, rows[i].labels);
            if (no != NULL && egpu_api_selector_matches(&s, no))
                fail_msg("\"%s\" matches %s", rows[i].text, rows[i].no_labels);
            json_decref(yes);
            json_decref(no);
        }
    }
}

#define EGPU_OBJ(spec, st) \
    "{" HEAD("ElasticGPU") ",'metadata':{'name':'e1'},'spec':{" spec "}" st "}"
#define SHARE(core)                              \
    "'capacity':{'elasticgpu.io/gpu-core':" core \
    "},'nodeName':'n1','gpuShare':{'gpuName':'n1-gpu0'}"

static void test_egpu_rules(void **state)
{
    static const struct row rows[] = {
        {"share", EGPU_OBJ(SHARE("30"), ""), "", 0},
        {"share with memory and claim",
         EGPU_OBJ("'capacity':{'elasticgpu.io/gpu-core':30,'elasticgpu.io/gpu-memory':4096},"
                  "'nodeName':'n1','gpuShare':{'gpuName':'g0'},'claimRef':{'namespace':'ml',"
                  "'name':'train','uid':'u-1'},'elasticGPUClassName':'fast',"
                  "'reclaimPolicy':'Retain'",
                  ",'status':{'phase':'Bound','reason':'Bound','message':'bound to ml/train',"
                  "'observedGeneration':2,'gpuName':'g0','model':'NVIDIA T4','corePercent':30}"),
         "", 0},
        {"physical",
         EGPU_OBJ("'capacity':{'elasticgpu.io/gpu-core':200},'nodeName':'n1',"
                  "'physicalGPU':{'gpuNames':['g0','g1']}",
                  ",'status':{'phase':'Available'}"),
         "", 0},
        {"both sources", EGPU_OBJ(SHARE("30") ",'physicalGPU':{'gpuNames':['g0']}", ""),
         "spec has both gpuShare and physicalGPU; allowed: exactly one of them", EGPU_ERANGE},
        {"no source", EGPU_OBJ("'capacity':{'elasticgpu.io/gpu-core':30},'nodeName':'n1'", ""),
         "spec has neither gpuShare nor physicalGPU; allowed: exactly one of them", EGPU_ERANGE},
        {"share of a whole card", EGPU_OBJ(SHARE("100"), ""),
         "spec.capacity.elasticgpu.io/gpu-core is 100 with gpuShare; allowed: 1..99, a slice of "
         "one card (whole cards are physicalGPU)",
         EGPU_ERANGE},
        {"core 150", EGPU_OBJ(SHARE("150"), ""),
         "spec.capacity.elasticgpu.io/gpu-core is 150; " CORE_ALLOWED, EGPU_ERANGE},
        {"core 0", EGPU_OBJ(SHARE("0"), ""),
         "spec.capacity.elasticgpu.io/gpu-core is 0; " CORE_ALLOWED " (at most 6400)", EGPU_ERANGE},
        {"cards and core disagree",
         EGPU_OBJ("'capacity':{'elasticgpu.io/gpu-core':200},'nodeName':'n1',"
                  "'physicalGPU':{'gpuNames':['g0','g1','g2']}",
                  ""),
         "spec.capacity.elasticgpu.io/gpu-core is 200 with 3 physicalGPU gpuNames; allowed: 100 "
         "per whole card (300)",
         EGPU_ERANGE},
        {"memory on whole cards",
         EGPU_OBJ("'capacity':{'elasticgpu.io/gpu-core':100,'elasticgpu.io/gpu-memory':1},"
                  "'nodeName':'n1','physicalGPU':{'gpuNames':['g0']}",
                  ""),
         "spec.capacity.elasticgpu.io/gpu-memory is 1 with physicalGPU; allowed: no gpu-memory "
         "on whole cards, which come with all their memory",
         EGPU_ERANGE},
        {"card twice",
         EGPU_OBJ("'capacity':{'elasticgpu.io/gpu-core':200},'nodeName':'n1',"
                  "'physicalGPU':{'gpuNames':['g0','g0']}",
                  ""),
         "spec.physicalGPU.gpuNames[1] is \"g0\" again; allowed: each card once", EGPU_ERANGE},
        {"no cards",
         EGPU_OBJ("'capacity':{'elasticgpu.io/gpu-core':100},'nodeName':'n1',"
                  "'physicalGPU':{'gpuNames':[]}",
                  ""),
         "spec.physicalGPU.gpuNames must be a list of 1..64 GPU names", EGPU_ESYNTAX},
        {"no gpuName",
         EGPU_OBJ("'capacity':{'elasticgpu.io/gpu-core':10},'nodeName':'n1','gpuShare':{}", ""),
         "spec.gpuShare.gpuName is missing", EGPU_ESYNTAX},
        {"no node",
         EGPU_OBJ("'capacity':{'elasticgpu.io/gpu-core':10},'gpuShare':{'gpuName':'g'}", ""),
         "spec.nodeName is missing", EGPU_ESYNTAX},
        {"no capacity", EGPU_OBJ("'nodeName':'n1'", ""), "spec.capacity is missing", EGPU_ESYNTAX},
        {"no core", EGPU_OBJ("'capacity':{},'nodeName':'n1'", ""),
         "spec.capacity.elasticgpu.io/gpu-core is missing", EGPU_ESYNTAX},
        {"claimRef without name", EGPU_OBJ(SHARE("30") ",'claimRef':{'namespace':'ml'}", ""),
         "spec.claimRef.name is missing", EGPU_ESYNTAX},
        {"reclaimPolicy", EGPU_OBJ(SHARE("30") ",'reclaimPolicy':'Recycle'", ""),
         "spec.reclaimPolicy is \"Recycle\"; allowed: Delete, Retain", EGPU_ERANGE},
        {"phase", EGPU_OBJ(SHARE("30"), ",'status':{'phase':'Lost'}"),
         "status.phase is \"Lost\"; allowed: Pending, Available, Bound, Released, Failed",
         EGPU_ERANGE},
        {"corePercent", EGPU_OBJ(SHARE("30"), ",'status':{'corePercent':100}"),
         "status.corePercent is 100; allowed: 1..99, the percent of the chosen card", EGPU_ERANGE},
        {"a namespace is ignored",
         "{" HEAD("ElasticGPU") ",'metadata':{'name':'e1','namespace':'x'},'spec':{" SHARE(
             "30") "}}",
         "", 0},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        check(EGPU, rows[i].what, rows[i].text, rows[i].want, rows[i].code);
}

struct tflops_row {
    int64_t tflops_milli, peak_milli, want; /* want 0: refused with msg */
    const char *msg;
};

static void test_tflops_to_core(void **state)
{
    static const struct tflops_row rows[] = {
        {156000, 312000, 50, NULL}, /* exactly half */
        {31200, 312000, 10, NULL},  /* exact in thousandths, no float error */
        {31201, 312000, 11, NULL},  /* a little more rounds up */
        {1, 312000, 1, NULL},       /* the least is 1% */
        {308880, 312000, 99, NULL}, /* 99% exactly */
        {308881, 312000, 0,
         "elasticgpu.io/gpu-tflops 308.881 is 100% of a card of 312 TFLOPS; allowed: at most "
         "99% of one card, 308.88 TFLOPS"},
        {400000, 312000, 0,
         "elasticgpu.io/gpu-tflops 400 is 129% of a card of 312 TFLOPS; allowed: at most 99% of "
         "one card, 308.88 TFLOPS"},
        {8000, 8100, 99, NULL},
        {19500, 0, 0,
         "elasticgpu.io/gpu-tflops 19.5 on a card of 0 TFLOPS; allowed: both above 0 and at most "
         "1000000"},
        {0, 312000, 0,
         "elasticgpu.io/gpu-tflops 0 on a card of 312 TFLOPS; allowed: both above 0 and at most "
         "1000000"},
        {1000000000, 1000000000, 0,
         "elasticgpu.io/gpu-tflops 1000000 is 100% of a card of 1000000 TFLOPS; allowed: at most "
         "99% of one card, 990000 TFLOPS"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct egpu_error err = {0};
        int64_t pct = -7;
        int rc = egpu_api_tflops_to_core(rows[i].tflops_milli, rows[i].peak_milli, &pct, &err);

        if (rows[i].msg == NULL) {
            if (rc != 0 || pct != rows[i].want)
                fail_msg("row %zu: rc %d pct %lld, want %lld (%s)", i, rc, (long long)pct,
                         (long long)rows[i].want, err.msg);
        } else {
            assert_int_equal(rc, EGPU_ERANGE);
            assert_int_equal(pct, -7);
            assert_string_equal(err.msg, rows[i].msg);
        }
    }
}

/* A share ElasticGPU: core, memory (0 = none), phase, claimRef "ns/name" or NULL. */
static struct egpu_api_egpu share(const char *name, int64_t core, int64_t mem,
                                  enum egpu_api_egpu_phase phase, const char *ref)
{
    struct egpu_api_egpu e;

    memset(&e, 0, sizeof(e));
    snprintf(e.meta.name, sizeof(e.meta.name), "%s", name);
    e.core_pct = core;
    e.mem_mib = mem;
    e.has_mem = mem > 0;
    e.source = EGPU_API_PROVISIONER_GPUSHARE;
    e.ngpus = 1;
    snprintf(e.node_name, sizeof(e.node_name), "n1");
    snprintf(e.gpu_names[0], sizeof(e.gpu_names[0]), "g0");
    snprintf(e.class_name, sizeof(e.class_name), "fast");
    e.phase = phase;
    if (ref != NULL) {
        e.has_claim_ref = true;
        sscanf(ref, "%63[^/]/%253s", e.claim_ns, e.claim_name);
    }
    return e;
}

static struct egpu_api_claim claim(int64_t core, int64_t tflops_milli, int64_t mem)
{
    struct egpu_api_claim c;

    memset(&c, 0, sizeof(c));
    snprintf(c.meta.ns, sizeof(c.meta.ns), "ml");
    snprintf(c.meta.name, sizeof(c.meta.name), "train");
    snprintf(c.meta.uid, sizeof(c.meta.uid), "u-1");
    snprintf(c.class_name, sizeof(c.class_name), "fast");
    c.core_pct = core;
    c.tflops_milli = tflops_milli;
    c.mem_mib = mem;
    c.has_mem = mem > 0;
    return c;
}

static void test_fit(void **state)
{
    struct egpu_api_class cls;
    struct egpu_api_claim c30 = claim(30, 0, 4096), tf = claim(0, 156000, 0),
                          whole = claim(200, 0, 0), noclass = claim(30, 0, 0);
    struct egpu_api_egpu e = share("e1", 40, 8192, EGPU_API_EGPU_AVAILABLE, NULL), x;
    struct egpu_api_egpu phys = share("p1", 200, 0, EGPU_API_EGPU_AVAILABLE, NULL);
    int64_t core = -1;

    (void)state;
    memset(&cls, 0, sizeof(cls));
    snprintf(cls.meta.name, sizeof(cls.meta.name), "fast");
    snprintf(cls.models, sizeof(cls.models), "A100-SXM4-80GB|T4");
    cls.npeaks = 1;
    snprintf(cls.peaks[0].model, sizeof(cls.peaks[0].model), "A100-SXM4-80GB");
    cls.peaks[0].tflops_milli = 312000;
    phys.source = EGPU_API_PROVISIONER_PHYSICAL;
    snprintf(noclass.class_name, sizeof(noclass.class_name), "slow");

    assert_int_equal(egpu_api_egpu_fit(&e, &c30, &cls, "NVIDIA T4", &core), EGPU_API_FIT_OK);
    assert_int_equal(core, 30);
    assert_int_equal(egpu_api_egpu_fit(&e, &c30, NULL, NULL, NULL), EGPU_API_FIT_OK);
    /* TFLOPS: 156 of a 312 card is 50%, more than the 40 it has. */
    assert_int_equal(egpu_api_egpu_fit(&e, &tf, &cls, "NVIDIA A100-SXM4-80GB", &core),
                     EGPU_API_FIT_CORE);
    x = e;
    x.core_pct = 50;
    core = -1;
    assert_int_equal(egpu_api_egpu_fit(&x, &tf, &cls, "NVIDIA A100-SXM4-80GB", &core),
                     EGPU_API_FIT_OK);
    assert_int_equal(core, 50);
    assert_int_equal(egpu_api_egpu_fit(&x, &tf, &cls, "NVIDIA T4", NULL), EGPU_API_FIT_MODEL);
    assert_int_equal(egpu_api_egpu_fit(&x, &tf, &cls, NULL, NULL), EGPU_API_FIT_MODEL);
    assert_int_equal(egpu_api_egpu_fit(&x, &tf, NULL, "NVIDIA A100-SXM4-80GB", NULL),
                     EGPU_API_FIT_MODEL);
    assert_int_equal(egpu_api_egpu_fit(&e, &c30, &cls, "NVIDIA H100", NULL), EGPU_API_FIT_MODEL);
    cls.peaks[0].tflops_milli = 150000; /* 156 TFLOPS need more than a 150 card */
    assert_int_equal(egpu_api_egpu_fit(&x, &tf, &cls, "A100-SXM4-80GB", NULL), EGPU_API_FIT_TFLOPS);
    cls.peaks[0].tflops_milli = 312000;
    /* Memory: less than asked, or none reserved. */
    x = e;
    x.mem_mib = 4095;
    assert_int_equal(egpu_api_egpu_fit(&x, &c30, &cls, NULL, NULL), EGPU_API_FIT_MEMORY);
    x.has_mem = false;
    x.mem_mib = 0;
    assert_int_equal(egpu_api_egpu_fit(&x, &c30, &cls, NULL, NULL), EGPU_API_FIT_MEMORY);
    assert_int_equal(egpu_api_egpu_fit(&x, &noclass, NULL, NULL, NULL), EGPU_API_FIT_CLASS);
    /* Kind: whole cards need physicalGPU and a physical class. */
    assert_int_equal(egpu_api_egpu_fit(&e, &whole, NULL, NULL, NULL), EGPU_API_FIT_KIND);
    assert_int_equal(egpu_api_egpu_fit(&phys, &whole, &cls, NULL, NULL), EGPU_API_FIT_KIND);
    cls.provisioner = EGPU_API_PROVISIONER_PHYSICAL;
    assert_int_equal(egpu_api_egpu_fit(&phys, &whole, &cls, NULL, NULL), EGPU_API_FIT_OK);
    assert_int_equal(egpu_api_egpu_fit(&e, &c30, &cls, NULL, NULL), EGPU_API_FIT_KIND);
    cls.provisioner = EGPU_API_PROVISIONER_GPUSHARE;
    /* Phase, claimRef and deletion. */
    x = share("e1", 40, 8192, EGPU_API_EGPU_PENDING, NULL);
    assert_int_equal(egpu_api_egpu_fit(&x, &c30, &cls, NULL, NULL), EGPU_API_FIT_PHASE);
    x.phase = EGPU_API_EGPU_RELEASED;
    assert_int_equal(egpu_api_egpu_fit(&x, &c30, &cls, NULL, NULL), EGPU_API_FIT_PHASE);
    x.phase = EGPU_API_EGPU_BOUND;
    assert_int_equal(egpu_api_egpu_fit(&x, &c30, &cls, NULL, NULL), EGPU_API_FIT_TAKEN);
    x = share("e1", 40, 8192, EGPU_API_EGPU_BOUND, "ml/train");
    assert_int_equal(egpu_api_egpu_fit(&x, &c30, &cls, NULL, NULL), EGPU_API_FIT_OK);
    snprintf(x.claim_uid, sizeof(x.claim_uid), "u-2"); /* a claim of that name, since recreated */
    assert_int_equal(egpu_api_egpu_fit(&x, &c30, &cls, NULL, NULL), EGPU_API_FIT_TAKEN);
    x = share("e1", 40, 8192, EGPU_API_EGPU_AVAILABLE, "other/train");
    assert_int_equal(egpu_api_egpu_fit(&x, &c30, &cls, NULL, NULL), EGPU_API_FIT_TAKEN);
    x = share("e1", 40, 8192, EGPU_API_EGPU_PENDING, "ml/train");
    assert_int_equal(egpu_api_egpu_fit(&x, &c30, &cls, NULL, NULL), EGPU_API_FIT_PHASE);
    /* Pending with this claim's uid in claimRef: provisioned for it and not
     * Bound yet. It fits, with the TFLOPS percent its binding records. */
    x = share("egpu-u-1", 50, 0, EGPU_API_EGPU_PENDING, "ml/train");
    snprintf(x.claim_uid, sizeof(x.claim_uid), "u-1");
    core = -1;
    assert_int_equal(egpu_api_egpu_fit(&x, &tf, &cls, "NVIDIA A100-SXM4-80GB", &core),
                     EGPU_API_FIT_OK);
    assert_int_equal(core, 50);
    snprintf(x.claim_uid, sizeof(x.claim_uid), "u-2");
    assert_int_equal(egpu_api_egpu_fit(&x, &tf, &cls, "NVIDIA A100-SXM4-80GB", NULL),
                     EGPU_API_FIT_TAKEN);
    snprintf(x.claim_uid, sizeof(x.claim_uid), "u-1");
    x.phase = EGPU_API_EGPU_RELEASED;
    assert_int_equal(egpu_api_egpu_fit(&x, &tf, &cls, "NVIDIA A100-SXM4-80GB", NULL),
                     EGPU_API_FIT_PHASE);
    x.phase = EGPU_API_EGPU_FAILED;
    assert_int_equal(egpu_api_egpu_fit(&x, &tf, &cls, "NVIDIA A100-SXM4-80GB", NULL),
                     EGPU_API_FIT_PHASE);
    x = e;
    snprintf(x.meta.deletion_timestamp, sizeof(x.meta.deletion_timestamp), "2026-07-24T00:00:00Z");
    assert_int_equal(egpu_api_egpu_fit(&x, &c30, &cls, NULL, NULL), EGPU_API_FIT_DELETING);
    assert_string_equal(egpu_api_fit_name(EGPU_API_FIT_OK), "fits");
    assert_string_equal(egpu_api_fit_name(EGPU_API_FIT_MEMORY), "memory");
    assert_string_equal(egpu_api_fit_name((enum egpu_api_fit)99), "unknown");
}

static void test_best_fit(void **state)
{
    struct egpu_api_claim c = claim(30, 0, 4096), tf = claim(0, 31200, 0);
    struct egpu_api_egpu a = share("a", 50, 8192, EGPU_API_EGPU_AVAILABLE, NULL),
                         b = share("b", 40, 16384, EGPU_API_EGPU_AVAILABLE, NULL),
                         c2 = share("c", 40, 8192, EGPU_API_EGPU_AVAILABLE, NULL),
                         d = share("d", 40, 8192, EGPU_API_EGPU_AVAILABLE, NULL),
                         small = share("e", 20, 8192, EGPU_API_EGPU_AVAILABLE, NULL),
                         taken = share("f", 30, 4096, EGPU_API_EGPU_BOUND, "x/y");
    struct egpu_api_class cls;
    const struct egpu_api_egpu *list[] = {&a, &b, &d, &c2, &small, &taken, NULL};
    const struct egpu_api_egpu *none[] = {&small, &taken};
    const char *models[] = {"T4", "A100", "A100", "A100", "A100", "A100", "A100"};

    (void)state;
    memset(&cls, 0, sizeof(cls));
    cls.npeaks = 2;
    snprintf(cls.peaks[0].model, sizeof(cls.peaks[0].model), "A100");
    cls.peaks[0].tflops_milli = 312000;
    snprintf(cls.peaks[1].model, sizeof(cls.peaks[1].model), "T4");
    cls.peaks[1].tflops_milli = 65000;
    /* Least core left (40 over 50), then least memory (8192 over 16384), then the name. */
    assert_int_equal(egpu_api_best_fit(list, NULL, 7, &c, NULL), 3);
    assert_int_equal(egpu_api_best_fit(list, NULL, 3, &c, NULL), 2);
    assert_int_equal(egpu_api_best_fit(list, NULL, 2, &c, NULL), 1);
    assert_int_equal(egpu_api_best_fit(none, NULL, 2, &c, NULL), -1);
    assert_int_equal(egpu_api_best_fit(list, NULL, 0, &c, NULL), -1);
    /* TFLOPS: 31.2 is 48% of a T4 ("a", 50: 2 left) and 10% of an A100. */
    tf.class_name[0] = '\0';
    for (size_t i = 0; i < 6; i++)
        ((struct egpu_api_egpu *)list[i])->class_name[0] = '\0';
    assert_int_equal(egpu_api_best_fit(list, models, 7, &tf, &cls), 0);
    a.core_pct = 45; /* too small for 48% now; "e" (20) leaves 10 of an A100 */
    assert_int_equal(egpu_api_best_fit(list, models, 7, &tf, &cls), 4);
    small.core_pct = 5; /* too small; then the least memory left, then the name: "c" */
    assert_int_equal(egpu_api_best_fit(list, models, 7, &tf, &cls), 3);
    /* Unknown models: no TFLOPS claim fits. */
    assert_int_equal(egpu_api_best_fit(list, NULL, 7, &tf, &cls), -1);
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(egpu_api_claim_phase_name(EGPU_API_CLAIM_LOST), "Lost");
    assert_string_equal(egpu_api_egpu_phase_name(EGPU_API_EGPU_RELEASED), "Released");
    assert_string_equal(egpu_api_reclaim_name(EGPU_API_RECLAIM_RETAIN), "Retain");
    assert_string_equal(egpu_api_binding_mode_name(EGPU_API_BINDING_WAIT_FOR_FIRST_CONSUMER),
                        "WaitForFirstConsumer");
    assert_string_equal(egpu_api_provisioner_name(EGPU_API_PROVISIONER_PHYSICAL),
                        "physical.provisioner.elasticgpu.io");
    assert_string_equal(egpu_api_cond_status_name(EGPU_API_COND_FALSE), "False");
    assert_string_equal(egpu_api_claim_phase_name((enum egpu_api_claim_phase)9), "unknown");
}

/* A claim's class: the named one, else the first by name of the defaults,
 * whatever order the classes come in. */
static void test_class_serves(void **state)
{
    struct egpu_api_class k[4];
    const char *names[4] = {"zeta", "alpha", "mid", "beta"};
    const bool dflt[4] = {true, false, true, true};
    static const int orders[3][4] = {{0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}};
    char buf[256];

    (void)state;
    memset(k, 0, sizeof(k));
    for (int i = 0; i < 4; i++) {
        snprintf(k[i].meta.name, sizeof(k[i].meta.name), "%s", names[i]);
        k[i].is_default = dflt[i];
    }
    for (int o = 0; o < 3; o++) {
        const struct egpu_api_class *def = NULL, *named = NULL, *none = NULL;

        for (int j = 0; j < 4; j++) {
            const struct egpu_api_class *x = &k[orders[o][j]];

            if (egpu_api_class_serves(x, "", def))
                def = x;
            if (egpu_api_class_serves(x, "alpha", named))
                named = x;
            if (egpu_api_class_serves(x, "nope", none))
                none = x;
        }
        assert_non_null(def);
        assert_string_equal(def->meta.name, "beta"); /* alpha is not a default */
        assert_non_null(named);
        assert_string_equal(named->meta.name, "alpha");
        assert_null(none);
    }
    assert_string_equal(egpu_api_class_missing("fast", buf, sizeof(buf)),
                        "ElasticGPUClass \"fast\" not found");
    assert_string_equal(egpu_api_class_missing("", buf, sizeof(buf)),
                        "no ElasticGPUClass is named and none is the default (annotation "
                        "elasticgpu.io/is-default-class: \"true\")");
}

/* The claim annotations of a pod: one row per rule, exact messages; the
 * good ones read back in order. */
static void test_pod_claims(void **state)
{
    static const struct {
        const char *ann; /* the annotations object, ' for " */
        int code;
        const char *want; /* the message, or "c1=claim1 c2=claim2" read back */
    } rows[] = {
        {"{}", 0, ""},
        {"{'other': 'x', 'egpuc.elasticgpu.io/main': 'train'}", 0, "main=train"},
        {"{'egpuc.elasticgpu.io/a': 'x', 'egpuc.elasticgpu.io/b': 'team/y'}", 0, "a=x b=y"},
        {"[]", EGPU_ESYNTAX, "metadata.annotations is not an object"},
        {"{'egpuc.elasticgpu.io/main': 3}", EGPU_ESYNTAX,
         "annotation egpuc.elasticgpu.io/main is not text"},
        {"{'egpuc.elasticgpu.io/Main': 'x'}", EGPU_ERANGE,
         "annotation egpuc.elasticgpu.io/Main: \"Main\" is not a container name; allowed: "
         "egpuc.elasticgpu.io/<container>, a DNS label of at most 63 bytes ([a-z0-9-])"},
        {"{'egpuc.elasticgpu.io/': 'x'}", EGPU_ERANGE,
         "annotation egpuc.elasticgpu.io/: \"\" is not a container name; allowed: "
         "egpuc.elasticgpu.io/<container>, a DNS label of at most 63 bytes ([a-z0-9-])"},
        {"{'egpuc.elasticgpu.io/main': 'other/x'}", EGPU_ERANGE,
         "annotation egpuc.elasticgpu.io/main: claim \"other/x\" is in another namespace; "
         "allowed: the name of an ElasticGPUClaim in the pod's own namespace team"},
        {"{'egpuc.elasticgpu.io/main': 'Big_Claim'}", EGPU_ERANGE,
         "annotation egpuc.elasticgpu.io/main: \"Big_Claim\" is not a claim name; allowed: a "
         "DNS subdomain of at most 253 bytes ([a-z0-9.-])"},
        {"{'egpuc.elasticgpu.io/main': ''}", EGPU_ERANGE,
         "annotation egpuc.elasticgpu.io/main: \"\" is not a claim name; allowed: a "
         "DNS subdomain of at most 253 bytes ([a-z0-9.-])"},
        {"{'egpuc.elasticgpu.io/a': 'x', 'egpuc.elasticgpu.io/b': 'x'}", EGPU_ERANGE,
         "annotations egpuc.elasticgpu.io/a and egpuc.elasticgpu.io/b: containers a and b both "
         "use claim x; allowed: one container per claim"},
    };
    (void)state;
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        char text[1024], got[1024] = "";
        struct egpu_api_pod_claim pc[2];
        struct egpu_error err = {0};
        size_t n = 99;
        json_t *pod;
        int rc;

        snprintf(text, sizeof(text), "{'metadata': {'namespace': 'team', 'annotations': %s}}",
                 rows[r].ann);
        pod = tu_json(text);
        rc = egpu_api_pod_claims(pod, pc, 2, &n, &err);
        json_decref(pod);
        if (rc == 0) {
            for (size_t i = 0; i < n; i++)
                snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s=%s", i ? " " : "",
                         pc[i].container, pc[i].claim);
        } else {
            snprintf(got, sizeof(got), "%s", err.msg);
            assert_int_equal(n, 0);
        }
        if (rc != rows[r].code || strcmp(got, rows[r].want) != 0)
            fail_msg("row %zu: %s: got %d \"%s\", want %d \"%s\"", r, rows[r].ann, rc, got,
                     rows[r].code, rows[r].want);
    }
    /* More than max claims. */
    {
        json_t *pod = tu_json("{'metadata': {'namespace': 'team', 'annotations': "
                              "{'egpuc.elasticgpu.io/a': 'x', 'egpuc.elasticgpu.io/b': 'y'}}}");
        struct egpu_api_pod_claim pc[1];
        struct egpu_error err = {0};
        size_t n;

        assert_int_equal(egpu_api_pod_claims(pod, pc, 1, &n, &err), EGPU_ERANGE);
        assert_string_equal(err.msg, "the pod uses more than 1 claims; allowed: at most 1");
        json_decref(pod);
    }
    /* No annotations at all; and the lookup by container. */
    {
        json_t *pod = tu_json("{'metadata': {'namespace': 'team'}}");
        struct egpu_api_pod_claim pc[2] = {{"a", "x"}, {"b", "y"}};
        size_t n = 5;

        assert_int_equal(egpu_api_pod_claims(pod, pc, 2, &n, NULL), 0);
        assert_int_equal(n, 0);
        json_decref(pod);
        snprintf(pc[0].container, sizeof(pc[0].container), "a");
        snprintf(pc[0].claim, sizeof(pc[0].claim), "x");
        assert_string_equal(egpu_api_pod_claim_of(pc, 2, "b"), "y");
        assert_null(egpu_api_pod_claim_of(pc, 2, "c"));
    }
    /* Names: the edges of a label and of a subdomain. */
    assert_true(egpu_api_dns_label("a-0"));
    assert_false(egpu_api_dns_label("-a"));
    assert_false(egpu_api_dns_label("a-"));
    assert_false(egpu_api_dns_label("a.b"));
    assert_false(egpu_api_dns_label(NULL));
    assert_true(egpu_api_dns_subdomain("a.b-c.d"));
    assert_false(egpu_api_dns_subdomain("a..b"));
    assert_false(egpu_api_dns_subdomain("a."));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_rules),    cmocka_unit_test(test_claim_fields),
        cmocka_unit_test(test_class_rules),    cmocka_unit_test(test_class_fields),
        cmocka_unit_test(test_selectors),      cmocka_unit_test(test_egpu_rules),
        cmocka_unit_test(test_tflops_to_core), cmocka_unit_test(test_fit),
        cmocka_unit_test(test_best_fit),       cmocka_unit_test(test_names),
        cmocka_unit_test(test_pod_claims),     cmocka_unit_test(test_class_serves),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
