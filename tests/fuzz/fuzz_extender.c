/* tests/fuzz/fuzz_extender.c - the extender's verbs on raw bodies
 * (egpu_extender_filter/prioritize/bind in src/scheduler/extender.c, with
 * the ExtenderArgs decoder of wire.c and the HostPriorityList kept by
 * plist.c), over a small in-memory cluster.
 *
 * Input: a script of steps separated by "\n%%\n"; each step is one letter
 * and a body:
 *   F<ExtenderArgs>         filter          P<ExtenderArgs>  prioritize
 *   B<ExtenderBindingArgs>  bind            A<v1.Pod>        pod added or changed
 *   D<namespace>/<name>     pod deleted     G<GPU object>    card added or changed
 *   E<ElasticGPU>           set             X<name>          ElasticGPU deleted
 *   C<ElasticGPUClaim>      set             K<ElasticGPUClass> set
 *   R<ResourceClaim>        set             Y<namespace>/<name> ResourceClaim deleted
 * Each input starts from the same fresh cluster (nodes n0..n3, cards on
 * n0, n1 and n3, pods ns/p0 and ns/p1 pending, ns/p2 placed on n3; classes
 * "now" (Immediate, the default) and "late" (WaitForFirstConsumer, nodes
 * zone=a); claim ns/c1 bound to ElasticGPU e1, 30% of n0-gpu1, and ns/c2 of
 * class late, Pending; DRA mode (--dra): ResourceClaim ns/rc1 allocated on
 * n0's gpu-0, 40%, and ns/rc2 not allocated, asking a 30% share, used by the
 * pending DRA pod ns/p3), so the steps after the first run on the extender's
 * placer memo and kept HostPriorityList, and pods may use the claims.
 *
 * Invariants: every reply is JSON with a status the header documents (503
 * only from prioritize, for a DRA pod whose claim is not cached); a
 * 400 leaks nothing and leaves the cache as it was; a filter or prioritize
 * reply made by this extender (from what it kept) has the same bytes as a
 * fresh extender's over the same cache; nothing leaks at the end.
 */
#include <errno.h>
#include <jansson.h>

#include "fuzz.h"
#include "egpu/scheduler.h"

#define SEP       "\n%%\n"
#define STEPS_MAX 16

static bool synced(void *data)
{
    (void)data;
    return true;
}

/* The API writes: fail for pods whose name says so, so both failure paths run. */
static int annotate(void *data, const char *ns, const char *name, const char *key,
                    const char *value, struct egpu_error *err)
{
    (void)data;
    (void)ns;
    (void)key;
    (void)value;
    if (strstr(name, "annotate-fails") != NULL)
        return egpu_error_set(err, -EIO, "annotate: injected failure");
    return 0;
}

static int bind(void *data, const char *ns, const char *name, const char *uid, const char *node,
                struct egpu_error *err)
{
    (void)data;
    (void)ns;
    (void)uid;
    (void)node;
    if (strstr(name, "bind-fails") != NULL)
        return egpu_error_set(err, -EIO, "bind: injected failure");
    return 0;
}

static int annotate_claim(void *data, const char *ns, const char *name, const char *node,
                          const char *gpus, struct egpu_error *err)
{
    (void)data;
    (void)ns;
    (void)node;
    (void)gpus;
    if (strstr(name, "claim-fails") != NULL)
        return egpu_error_set(err, -EIO, "annotate claim: injected failure");
    return 0;
}

static struct egpu_extender *extender(struct egpu_sched_cache *c)
{
    struct egpu_extender_ops ops = {
        .synced = synced, .annotate = annotate, .annotate_claim = annotate_claim, .bind = bind};
    /* place_cpu_pods: pods asking no GPU are judged and bound too, the longer
     * path (--pods-without-gpu pass only lets them through). */
    struct egpu_extender_config cfg = {.node_policy = EGPU_POLICY_BINPACK,
                                       .card_policy = EGPU_POLICY_BINPACK,
                                       .seed = 1,
                                       .place_cpu_pods = true,
                                       .dra = true};
    struct egpu_error err = {0};
    struct egpu_extender *x = egpu_extender_new(&cfg, c, &ops, &err);

    FUZZ_CHECK(x != NULL);
    return x;
}

static void set_json(struct egpu_sched_cache *c, const char *text, char kind)
{
    struct egpu_error err = {0};
    json_t *o = json_loads(text, 0, NULL);
    int rc;

    FUZZ_CHECK(o != NULL);
    rc = kind == 'N'   ? egpu_sched_cache_node_set(c, o, &err)
         : kind == 'G' ? egpu_sched_cache_gpu_set(c, o, &err)
         : kind == 'E' ? egpu_sched_cache_egpu_set(c, o, &err)
         : kind == 'C' ? egpu_sched_cache_claim_set(c, o, &err)
         : kind == 'K' ? egpu_sched_cache_class_set(c, o, &err)
         : kind == 'R' ? egpu_sched_cache_dra_claim_set(c, o, &err)
                       : egpu_sched_cache_pod_set(c, o, &err);
    if (rc != 0) {
        fprintf(stderr, "set-up %s: %s\n", text, err.msg);
        abort();
    }
    json_decref(o);
}

static void add_node(struct egpu_sched_cache *c, const char *name, int ngpus, const char *model)
{
    char text[512];

    snprintf(text, sizeof(text),
             "{\"metadata\":{\"name\":\"%s\",\"labels\":{\"zone\":\"a\"}},"
             "\"status\":{\"allocatable\":{\"cpu\":\"64\",\"memory\":\"256Gi\"}}}",
             name);
    set_json(c, text, 'N');
    for (int i = 0; i < ngpus; i++) {
        snprintf(text, sizeof(text),
                 "{\"metadata\":{\"name\":\"%s-gpu%d\"},\"spec\":{\"nodeName\":\"%s\","
                 "\"index\":%d,\"uuid\":\"GPU-%s-%d\",\"model\":\"%s\",\"memory\":40960}}",
                 name, i, name, i, name, i, model);
        set_json(c, text, 'G');
    }
}

static struct egpu_sched_cache *cluster(void)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();

    FUZZ_CHECK(c != NULL);
    add_node(c, "n0", 4, "A100");
    add_node(c, "n1", 2, "T4");
    add_node(c, "n2", 0, "");
    add_node(c, "n3", 8, "A100");
    set_json(
        c,
        "{\"metadata\":{\"name\":\"p0\",\"namespace\":\"ns\",\"uid\":\"u0\"},"
        "\"spec\":{\"schedulerName\":\"elastic-gpu-scheduler\",\"containers\":[{\"name\":\"c0\","
        "\"resources\":{\"requests\":{\"cpu\":\"1\",\"memory\":\"1Gi\","
        "\"elasticgpu.io/gpu-core\":\"50\",\"elasticgpu.io/gpu-memory\":\"1024\"}}}]},"
        "\"status\":{\"phase\":\"Pending\"}}",
        'P');
    set_json(
        c,
        "{\"metadata\":{\"name\":\"p1\",\"namespace\":\"ns\",\"uid\":\"u1\"},"
        "\"spec\":{\"schedulerName\":\"elastic-gpu-scheduler\",\"containers\":[{\"name\":\"c0\","
        "\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":\"200\"}}}]},"
        "\"status\":{\"phase\":\"Pending\"}}",
        'P');
    set_json(c,
             "{\"metadata\":{\"name\":\"p2\",\"namespace\":\"ns\",\"uid\":\"u2\","
             "\"annotations\":{\"elasticgpu.io/assigned\":\"{\\\"node\\\":\\\"n3\\\","
             "\\\"containers\\\":[{\\\"name\\\":\\\"c0\\\",\\\"core\\\":30,\\\"memory\\\":0,"
             "\\\"gpus\\\":[\\\"GPU-n3-0\\\"]}]}\"}},"
             "\"spec\":{\"nodeName\":\"n3\",\"containers\":[{\"name\":\"c0\","
             "\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":\"30\"}}}]},"
             "\"status\":{\"phase\":\"Running\"}}",
             'P');
    set_json(c,
             "{\"apiVersion\":\"elasticgpu.io/v1alpha1\",\"kind\":\"ElasticGPUClass\","
             "\"metadata\":{\"name\":\"now\",\"annotations\":{"
             "\"elasticgpu.io/is-default-class\":\"true\"}},"
             "\"provisioner\":\"gpushare.provisioner.elasticgpu.io\"}",
             'K');
    set_json(c,
             "{\"apiVersion\":\"elasticgpu.io/v1alpha1\",\"kind\":\"ElasticGPUClass\","
             "\"metadata\":{\"name\":\"late\"},\"bindingMode\":\"WaitForFirstConsumer\","
             "\"parameters\":{\"nodeSelector\":\"zone=a\"},"
             "\"provisioner\":\"gpushare.provisioner.elasticgpu.io\"}",
             'K');
    set_json(c,
             "{\"apiVersion\":\"elasticgpu.io/v1alpha1\",\"kind\":\"ElasticGPUClaim\","
             "\"metadata\":{\"name\":\"c1\",\"namespace\":\"ns\",\"uid\":\"uc1\"},"
             "\"spec\":{\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":30}}},"
             "\"status\":{\"phase\":\"Bound\",\"elasticGPUName\":\"e1\"}}",
             'C');
    set_json(c,
             "{\"apiVersion\":\"elasticgpu.io/v1alpha1\",\"kind\":\"ElasticGPUClaim\","
             "\"metadata\":{\"name\":\"c2\",\"namespace\":\"ns\",\"uid\":\"uc2\"},"
             "\"spec\":{\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":20}},"
             "\"elasticGPUClassName\":\"late\"}}",
             'C');
    set_json(c,
             "{\"apiVersion\":\"elasticgpu.io/v1alpha1\",\"kind\":\"ElasticGPU\","
             "\"metadata\":{\"name\":\"e1\"},\"spec\":{\"capacity\":{"
             "\"elasticgpu.io/gpu-core\":30},\"nodeName\":\"n0\",\"gpuShare\":{"
             "\"gpuName\":\"n0-gpu1\"},\"claimRef\":{\"namespace\":\"ns\",\"name\":\"c1\","
             "\"uid\":\"uc1\"}},\"status\":{\"phase\":\"Bound\"}}",
             'E');
    set_json(c,
             "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\","
             "\"metadata\":{\"name\":\"rc1\",\"namespace\":\"ns\",\"resourceVersion\":\"5\"},"
             "\"spec\":{\"devices\":{\"requests\":[{\"name\":\"gpu\",\"exactly\":{"
             "\"deviceClassName\":\"gpu-share.elasticgpu.io\",\"count\":1,\"capacity\":{"
             "\"requests\":{\"cores\":\"40\",\"memory\":\"4Gi\"}}}}]}},"
             "\"status\":{\"allocation\":{\"devices\":{\"results\":[{\"request\":\"gpu\","
             "\"driver\":\"gpu.elasticgpu.io\",\"pool\":\"n0\",\"device\":\"gpu-0\","
             "\"consumedCapacity\":{\"cores\":\"40\",\"memory\":\"4Gi\"}}]}}}}",
             'R');
    set_json(c,
             "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\","
             "\"metadata\":{\"name\":\"rc2\",\"namespace\":\"ns\",\"resourceVersion\":\"6\"},"
             "\"spec\":{\"devices\":{\"requests\":[{\"name\":\"gpu\",\"exactly\":{"
             "\"deviceClassName\":\"gpu-share.elasticgpu.io\",\"count\":1,\"capacity\":{"
             "\"requests\":{\"cores\":\"30\"}}}}]}}}",
             'R');
    set_json(c,
             "{\"metadata\":{\"name\":\"p3\",\"namespace\":\"ns\",\"uid\":\"u3\"},"
             "\"spec\":{\"schedulerName\":\"elastic-gpu-scheduler\",\"resourceClaims\":["
             "{\"name\":\"egpu-0\",\"resourceClaimName\":\"rc2\"}],\"containers\":[{"
             "\"name\":\"c0\",\"resources\":{\"requests\":{\"cpu\":\"1\","
             "\"elasticgpu.io/dra\":\"1\"},\"claims\":[{\"name\":\"egpu-0\"}]}}]},"
             "\"status\":{\"phase\":\"Pending\"}}",
             'P');
    return c;
}

static bool same_stats(const struct egpu_sched_cache_stats *a,
                       const struct egpu_sched_cache_stats *b)
{
    return a->nodes == b->nodes && a->gpus == b->gpus && a->pods == b->pods &&
           a->placed == b->placed && a->unresolved == b->unresolved;
}

typedef int (*verb_fn)(struct egpu_extender *, const char *, size_t, struct egpu_buf *);

static void run_verb(struct egpu_extender *x, struct egpu_sched_cache *c, char verb,
                     const char *body, size_t len)
{
    verb_fn fn = verb == 'F'   ? egpu_extender_filter
                 : verb == 'P' ? egpu_extender_prioritize
                               : egpu_extender_bind;
    struct egpu_sched_cache_stats before, after;
    struct egpu_buf reply;
    long live = egpu_alloc_live();
    json_t *doc;
    int status;

    egpu_sched_cache_stats(c, &before);
    egpu_buf_init(&reply, 16 << 20);
    status = fn(x, body, len, &reply);
    /* Refusals are 200 with the protocol's Error; 400 only for a body that is not the
     * protocol's. */
    if (!(status == 200 || status == 400 || status == 500 || (status == 503 && verb == 'P'))) {
        fprintf(stderr, "%c: status %d: %.*s\n", verb, status, (int)reply.len, reply.data);
        abort();
    }
    doc = json_loadb(reply.data ? reply.data : "", reply.len, 0, NULL);
    if (doc == NULL) {
        fprintf(stderr, "status %d, reply is not JSON: %.*s\n", status, (int)reply.len,
                reply.data ? reply.data : "");
        abort();
    }
    json_decref(doc);
    if (status == 400) {
        egpu_sched_cache_stats(c, &after);
        FUZZ_CHECK(same_stats(&before, &after));
        egpu_buf_free(&reply);
        FUZZ_CHECK(egpu_alloc_live() == live);
        return;
    }
    if (status == 200 && verb != 'B') {
        /* What this extender made from its kept state equals a fresh one's. */
        struct egpu_extender *y = extender(c);
        struct egpu_buf fresh;
        int fresh_status;

        egpu_buf_init(&fresh, 16 << 20);
        fresh_status = fn(y, body, len, &fresh);
        if (fresh_status != status || fresh.len != reply.len ||
            memcmp(fresh.data, reply.data, reply.len) != 0) {
            fprintf(stderr, "%c: kept reply (%d) %.*s\nfresh reply (%d) %.*s\n", verb, status,
                    (int)reply.len, reply.data, fresh_status, (int)fresh.len,
                    fresh.data ? fresh.data : "");
            abort();
        }
        egpu_buf_free(&fresh);
        egpu_extender_free(y);
    }
    egpu_buf_free(&reply);
}

static void run_cache(struct egpu_sched_cache *c, char verb, const char *body, size_t len)
{
    struct egpu_error err = {0};
    json_t *o;
    int rc;

    if (verb == 'D') {
        char *slash = strchr(body, '/');

        if (slash != NULL) {
            *slash = '\0';
            rc = egpu_sched_cache_pod_delete(c, body, slash + 1);
        }
        return;
    }
    if (verb == 'X') {
        (void)egpu_sched_cache_egpu_delete(c, body);
        return;
    }
    if (verb == 'Y') {
        char *slash = strchr(body, '/');

        if (slash != NULL) {
            *slash = '\0';
            (void)egpu_sched_cache_dra_claim_delete(c, body, slash + 1);
        }
        return;
    }
    o = json_loadb(body, len, 0, NULL);
    if (o == NULL)
        return;
    /* Refused objects are fine; the cache must just stay whole. */
    rc = verb == 'A'   ? egpu_sched_cache_pod_set(c, o, &err)
         : verb == 'E' ? egpu_sched_cache_egpu_set(c, o, &err)
         : verb == 'C' ? egpu_sched_cache_claim_set(c, o, &err)
         : verb == 'K' ? egpu_sched_cache_class_set(c, o, &err)
         : verb == 'R' ? egpu_sched_cache_dra_claim_set(c, o, &err)
                       : egpu_sched_cache_gpu_set(c, o, &err);
    (void)rc;
    json_decref(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    long live = egpu_alloc_live();
    struct egpu_sched_cache *c = cluster();
    struct egpu_extender *x = extender(c);
    const uint8_t *part;
    size_t part_len;

    for (int step = 0; step < STEPS_MAX && fuzz_next_part(&data, &size, SEP, &part, &part_len);
         step++) {
        char verb, *body;

        if (part_len == 0)
            continue;
        verb = (char)part[0];
        /* The verbs get the body in a heap block of its exact size, so a read
         * past its end is caught; the cache steps want a string. */
        body = verb == 'F' || verb == 'P' || verb == 'B' ? fuzz_dup(part + 1, part_len - 1)
                                                         : fuzz_cstr(part + 1, part_len - 1);
        switch (verb) {
        case 'F':
        case 'P':
        case 'B':
            run_verb(x, c, verb, body, part_len - 1);
            break;
        case 'A':
        case 'D':
        case 'G':
        case 'E':
        case 'X':
        case 'C':
        case 'K':
        case 'R':
        case 'Y':
            run_cache(c, verb, body, part_len - 1);
            break;
        default:
            break;
        }
        free(body);
    }
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    FUZZ_CHECK(egpu_alloc_live() == live);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}
