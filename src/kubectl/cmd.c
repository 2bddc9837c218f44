/* kubectl/cmd.c - kubectl-egpu's command line: flags as kubectl takes
 * them, the kubeconfig and context resolved as kubectl resolves them
 * (egpu_kube_config_load), one consistent list per kind read from the API
 * server, every object decoded by src/api's decoders, and what render.c
 * makes of them on stdout.
 *
 * Exit status: 0; 1 after an API error (one line naming the server, the
 * resource and the HTTP status, or why the server could not be reached) or
 * a kubeconfig that cannot be used; 2 after bad usage (a line saying what,
 * then the usage text, on stderr). An object that does not decode is left
 * out with a warning naming it and the field, as one bad object must not
 * hide the rest.
 *
 * DRA mode (inspect): after the GPU objects, the ResourceSlices of
 * EGPU_API_DRA_DRIVER (fieldSelector spec.driver, and spec.nodeName for
 * NODE) and, when they hold a device, the ResourceClaims of every
 * namespace (dra.c decodes both). Those two lists are optional: a 404 (no
 * resource.k8s.io/v1, Kubernetes before 1.34) means no DRA node, a 403 a
 * warning and the GPU objects alone; any other error is exit 1 as above.
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "egpu/cli.h"
#include "egpu/kube.h"
#include "egpu/log.h"
#include "kubectl_int.h"

static const char usage[] =
    "Usage: kubectl egpu COMMAND [OPTION]...\n"
    "Elastic GPU's kubectl plugin: what is allocated on every GPU, and the claims\n"
    "and budgets of namespaces.\n"
    "\n"
    "Commands:\n"
    "  inspect [NODE]   per node and card: model, health, core allocated/100, memory\n"
    "                   allocated/total MiB, the containers on it; totals per node\n"
    "                   and for the cluster; nodes in DRA mode from their\n"
    "                   ResourceSlice and the allocated ResourceClaims\n"
    "  claims           ElasticGPUClaims: phase, request, class, ElasticGPU, its node\n"
    "                   and card, age\n"
    "  budget           GPUBudgets: GPU-hours, used, remaining, state, period\n"
    "\n"
    "Options:\n"
    "  --kubeconfig FILE      kubeconfig (default $KUBECONFIG, else ~/.kube/config,\n"
    "                         else the in-cluster service account)\n"
    "  --context NAME         kubeconfig context (default: current-context)\n"
    "  -n, --namespace NS     claims and budget: the namespace (default: the\n"
    "                         context's, else default)\n"
    "  -A, --all-namespaces   claims and budget: every namespace\n"
    "  -o, --output FORMAT    wide (more columns) or json (docs/kubectl.md)\n"
    "  -h, --help             show this help\n"
    "  --version              show the version\n"
    "\n"
    "Exit status: 0; 1 when the API server answers with an error or cannot be\n"
    "reached; 2 on bad usage.\n";

enum subcommand { CMD_INSPECT, CMD_CLAIMS, CMD_BUDGET };

struct kp {
    enum subcommand cmd;
    const char *node; /* inspect's NODE, or NULL */
    const char *kubeconfig, *context, *ns;
    bool all_ns;
    enum egpu_kubectl_output fmt;
    struct egpu_kube_config *cfg;
    struct egpu_kube *kc;
};

static int bad_usage(const char *fmt, ...) EGPU_PRINTF(1, 2);
static int bad_usage(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, EGPU_KUBECTL_PROG ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n%s", usage);
    return 2;
}

/* Parse argv into *k. Returns -1 to run, 0 after --help or --version, 2 on
 * bad usage. */
static int parse(int argc, char **argv, struct kp *k)
{
    static const struct option opts[] = {
        {"kubeconfig", required_argument, NULL, 'K'},
        {"context", required_argument, NULL, 'C'},
        {"namespace", required_argument, NULL, 'n'},
        {"all-namespaces", no_argument, NULL, 'A'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'}, /* EGPU_VERSION_LINE */
        {NULL, 0, NULL, 0},
    };
    int c;

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":n:Ao:h", opts, NULL)) != -1) {
        switch (c) {
        case 'K':
            k->kubeconfig = optarg;
            break;
        case 'C':
            k->context = optarg;
            break;
        case 'n':
            if (optarg[0] == '\0')
                return bad_usage("--namespace is empty; allowed: a namespace name");
            k->ns = optarg;
            break;
        case 'A':
            k->all_ns = true;
            break;
        case 'o':
            if (strcmp(optarg, "wide") == 0)
                k->fmt = EGPU_KUBECTL_WIDE;
            else if (strcmp(optarg, "json") == 0)
                k->fmt = EGPU_KUBECTL_JSON;
            else
                return bad_usage("unknown output format \"%s\"; allowed: wide, json", optarg);
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        case 'V':
            fputs(EGPU_VERSION_LINE(EGPU_KUBECTL_PROG), stdout);
            return 0;
        case ':':
            return bad_usage("flag %s needs a value", argv[optind - 1]);
        default:
            if (optopt != 0) {
                char f[3] = {'-', (char)optopt, '\0'};

                return bad_usage("unknown flag %s", f);
            }
            return bad_usage("unknown flag %s", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return bad_usage("no command given; allowed: inspect, claims, budget");
    if (strcmp(argv[optind], "inspect") == 0)
        k->cmd = CMD_INSPECT;
    else if (strcmp(argv[optind], "claims") == 0)
        k->cmd = CMD_CLAIMS;
    else if (strcmp(argv[optind], "budget") == 0)
        k->cmd = CMD_BUDGET;
    else
        return bad_usage("unknown command \"%s\"; allowed: inspect, claims, budget", argv[optind]);
    optind++;
    if (k->cmd == CMD_INSPECT && optind < argc)
        k->node = argv[optind++];
    if (optind < argc)
        return bad_usage("unexpected argument \"%s\"", argv[optind]);
    return -1;
}

/* s on stderr, a control character (C0, C1, BiDi) as '?'
 * (egpu__kubectl_text_clean: an object's text must not reach the terminal as
 * an escape sequence, add a line nor reorder the message). */
static void put_clean(const char *s)
{
    char buf[EGPU_ERRMSG_MAX];

    snprintf(buf, sizeof(buf), "%s", s);
    egpu__kubectl_text_clean(buf);
    fputs(buf, stderr);
}

/* List res (in ns; NULL = every namespace or cluster-scoped; fields: a
 * fieldSelector or NULL) into *items (the list's items, a new reference).
 * Returns 0, or 1 after the one-line message; with optional, 2 without a
 * message when the server does not serve res (404: a cluster before
 * resource.k8s.io/v1), and 2 after a warning when it forbids the list
 * (403), so a user who may read GPU objects still sees them. */
static int list_sel(struct kp *k, const struct egpu_kube_resource *res, const char *ns,
                    const char *fields, bool optional, json_t **items)
{
    struct egpu_kube_list_opts opts = {.field_selector = fields};
    struct egpu_kube_status st;
    struct egpu_error err = {0};
    json_t *l = NULL;
    int rc;

    memset(&st, 0, sizeof(st));
    rc = egpu_kube_list(k->kc, res, ns, &opts, &l, &st, &err);
    if (rc && optional && st.code == 404)
        return 2;
    if (rc && optional && st.code == 403) {
        fprintf(stderr,
                EGPU_KUBECTL_PROG ": warning: listing %s.%s from %s: HTTP 403 Forbidden; DRA-mode "
                                  "cards and shares are not shown\n",
                res->plural, res->group, k->cfg->server);
        return 2;
    }
    if (rc) {
        /* The API server's message may quote a tenant's object. */
        if (st.code >= 100) {
            fprintf(stderr, EGPU_KUBECTL_PROG ": listing %s.%s from %s: HTTP %d ", res->plural,
                    res->group, k->cfg->server, st.code);
            put_clean(st.reason[0] ? st.reason : "Error");
            fputs(": ", stderr);
            put_clean(st.message);
        } else {
            fprintf(stderr, EGPU_KUBECTL_PROG ": cannot reach %s to list %s.%s: ", k->cfg->server,
                    res->plural, res->group);
            put_clean(err.msg[0] ? err.msg : egpu_strerror(rc));
        }
        fputc('\n', stderr);
        return 1;
    }
    *items = json_incref(json_object_get(l, "items"));
    json_decref(l);
    if (!json_is_array(*items)) {
        json_decref(*items);
        fprintf(stderr, EGPU_KUBECTL_PROG ": listing %s.%s from %s: the reply has no items\n",
                res->plural, res->group, k->cfg->server);
        return 1;
    }
    return 0;
}

static int list(struct kp *k, const struct egpu_kube_resource *res, const char *ns, json_t **items)
{
    return list_sel(k, res, ns, NULL, false, items);
}

static const char *obj_name(const json_t *o)
{
    const char *s = egpu_api_str(json_object_get(json_object_get(o, "metadata"), "name"));

    return s != NULL ? s : "?";
}

static void warn_skip(const char *kind, const json_t *o, const struct egpu_error *err)
{
    const char *ns = egpu_api_str(json_object_get(json_object_get(o, "metadata"), "namespace"));

    fprintf(stderr, EGPU_KUBECTL_PROG ": warning: %s ", kind);
    if (ns != NULL) {
        put_clean(ns);
        fputc('/', stderr);
    }
    put_clean(obj_name(o));
    fputs(" left out: ", stderr);
    put_clean(err->msg);
    fputc('\n', stderr);
}

/* A warning for an object shown in part: n of its parts left out, err
 * naming the first. */
static void warn_part(const char *kind, const json_t *o, int n, const struct egpu_error *err)
{
    const char *ns = egpu_api_str(json_object_get(json_object_get(o, "metadata"), "namespace"));

    fprintf(stderr, EGPU_KUBECTL_PROG ": warning: %s ", kind);
    if (ns != NULL) {
        put_clean(ns);
        fputc('/', stderr);
    }
    put_clean(obj_name(o));
    fprintf(stderr, ": %d result%s left out: ", n, n == 1 ? "" : "s");
    put_clean(err->msg);
    fputc('\n', stderr);
}

static int emit(int rc, struct egpu_buf *out)
{
    if (rc) {
        fprintf(stderr, EGPU_KUBECTL_PROG ": %s\n", egpu_strerror(rc));
        return 1;
    }
    fwrite(egpu_buf_str(out), 1, out->len, stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* The DRA-mode cards (the ResourceSlices of the driver, on node or every
 * node) and the allocated ResourceClaims of every namespace into a new *out.
 * Claims are read only when a slice gave a card. Returns 0 (a server
 * without resource.k8s.io/v1, or one that forbids the lists, gives no
 * cards: list_sel), or 1 after the message. */
static int read_dra(struct kp *k, struct egpu_kubectl_dra **out)
{
    struct egpu_kubectl_dra *d = egpu_kubectl_dra_new(EGPU_API_DRA_DRIVER);
    char fields[EGPU_K8S_NAME_MAX * 2 + 64];
    json_t *items = NULL, *o;
    size_t i;
    int rc;

    *out = d;
    if (d == NULL)
        return emit(-ENOMEM, NULL);
    if (k->node != NULL)
        snprintf(fields, sizeof(fields), "spec.driver=%s,spec.nodeName=%s", EGPU_API_DRA_DRIVER,
                 k->node);
    else
        snprintf(fields, sizeof(fields), "spec.driver=%s", EGPU_API_DRA_DRIVER);
    rc = list_sel(k, &egpu_kube_resourceslices, NULL, fields, true, &items);
    if (rc)
        return rc == 2 ? 0 : 1;
    json_array_foreach(items, i, o)
    {
        struct egpu_error err = {0};

        if (egpu_kubectl_dra_add_slice(d, o, &err))
            warn_skip("ResourceSlice", o, &err);
    }
    json_decref(items);
    items = NULL;
    if (egpu_kubectl_dra_cards(d, NULL) == 0)
        return 0;
    rc = list_sel(k, &egpu_kube_resourceclaims, NULL, NULL, true, &items);
    if (rc)
        return rc == 2 ? 0 : 1;
    json_array_foreach(items, i, o)
    {
        struct egpu_error err = {0};

        rc = egpu_kubectl_dra_add_claim(d, o, &err);
        if (rc < 0)
            warn_skip("ResourceClaim", o, &err);
        else if (rc > 0)
            warn_part("ResourceClaim", o, rc, &err);
    }
    json_decref(items);
    return 0;
}

static int run_inspect(struct kp *k)
{
    struct egpu_api_gpu *gpus = NULL;
    struct egpu_kubectl_dra *dra = NULL;
    struct egpu_buf out;
    json_t *items, *o;
    size_t n = 0, i, on_node = 0;
    int rc;

    if (list(k, &egpu_kube_gpus, NULL, &items))
        return 1;
    gpus = egpu_calloc(json_array_size(items) + 1, sizeof(*gpus));
    if (gpus == NULL) {
        json_decref(items);
        return emit(-ENOMEM, NULL);
    }
    json_array_foreach(items, i, o)
    {
        struct egpu_error err = {0};

        if (egpu_api_gpu_decode(o, &gpus[n], &err)) {
            warn_skip("GPU", o, &err);
            continue;
        }
        if (k->node == NULL || strcmp(gpus[n].node_name, k->node) == 0)
            on_node++;
        n++;
    }
    json_decref(items);
    egpu_buf_init(&out, EGPU_KUBECTL_OUT_MAX);
    if (read_dra(k, &dra)) {
        rc = 1;
        goto done;
    }
    on_node += egpu_kubectl_dra_cards(dra, k->node);
    if (on_node == 0 && k->node != NULL) {
        fprintf(stderr, EGPU_KUBECTL_PROG ": no GPU objects on node \"%s\"\n", k->node);
        rc = 1;
    } else if (on_node == 0 && k->fmt != EGPU_KUBECTL_JSON) {
        fprintf(stderr, "No GPU objects found.\n");
        rc = 0;
    } else {
        rc = emit(egpu_kubectl_inspect_all(gpus, n, dra, k->node, k->fmt, &out), &out);
    }
done:
    for (i = 0; i < n; i++)
        egpu_api_gpu_clear(&gpus[i]);
    egpu_free(gpus);
    egpu_kubectl_dra_free(dra);
    egpu_buf_free(&out);
    return rc;
}

static const char *ns_text(const struct kp *k)
{
    static char buf[EGPU_NAMESPACE_MAX + 32];

    if (k->all_ns)
        return "any namespace";
    snprintf(buf, sizeof(buf), "%s namespace", k->ns);
    return buf;
}

static int64_t created(const json_t *o)
{
    const char *s =
        egpu_api_str(json_object_get(json_object_get(o, "metadata"), "creationTimestamp"));
    int64_t t;

    if (s == NULL || egpu_api_time_parse(s, "metadata.creationTimestamp", &t, NULL))
        return 0;
    return t;
}

static int run_claims(struct kp *k)
{
    struct egpu_api_claim *claims = NULL;
    struct egpu_api_egpu *egpus = NULL;
    struct egpu_kubectl_claim_row *rows = NULL;
    json_t *items = NULL, *eitems = NULL, *o;
    struct egpu_buf out;
    size_t n = 0, ne = 0, i;
    bool bound = false;
    int rc = 1;

    egpu_buf_init(&out, EGPU_KUBECTL_OUT_MAX);
    if (list(k, &egpu_kube_elasticgpuclaims, k->all_ns ? NULL : k->ns, &items))
        goto done;
    claims = egpu_calloc(json_array_size(items) + 1, sizeof(*claims));
    rows = egpu_calloc(json_array_size(items) + 1, sizeof(*rows));
    if (claims == NULL || rows == NULL) {
        rc = emit(-ENOMEM, NULL);
        goto done;
    }
    json_array_foreach(items, i, o)
    {
        struct egpu_error err = {0};

        if (egpu_api_claim_decode(o, &claims[n], &err)) {
            warn_skip("ElasticGPUClaim", o, &err);
            continue;
        }
        rows[n].claim = &claims[n];
        rows[n].created_s = created(o);
        bound = bound || claims[n].bound_egpu[0] != '\0';
        n++;
    }
    if (bound) {
        if (list(k, &egpu_kube_elasticgpus, NULL, &eitems))
            goto done;
        egpus = egpu_calloc(json_array_size(eitems) + 1, sizeof(*egpus));
        if (egpus == NULL) {
            rc = emit(-ENOMEM, NULL);
            goto done;
        }
        json_array_foreach(eitems, i, o)
        {
            struct egpu_error err = {0};

            if (egpu_api_egpu_decode(o, &egpus[ne], &err))
                warn_skip("ElasticGPU", o, &err);
            else
                ne++;
        }
    }
    for (i = 0; i < n; i++)
        for (size_t j = 0; j < ne && claims[i].bound_egpu[0]; j++)
            if (strcmp(egpus[j].meta.name, claims[i].bound_egpu) == 0)
                rows[i].egpu = &egpus[j];
    if (n == 0 && k->fmt != EGPU_KUBECTL_JSON) {
        fprintf(stderr, "No ElasticGPUClaims found in %s.\n", ns_text(k));
        rc = 0;
    } else {
        rc = emit(egpu_kubectl_claims(rows, n, k->all_ns, (int64_t)time(NULL), k->fmt, &out), &out);
    }
done:
    json_decref(items);
    json_decref(eitems);
    egpu_free(claims);
    egpu_free(egpus);
    egpu_free(rows);
    egpu_buf_free(&out);
    return rc;
}

static int run_budget(struct kp *k)
{
    struct egpu_api_budget *budgets = NULL;
    const struct egpu_api_budget **v = NULL;
    json_t *items = NULL, *o;
    struct egpu_buf out;
    size_t n = 0, i;
    int rc = 1;

    egpu_buf_init(&out, EGPU_KUBECTL_OUT_MAX);
    if (list(k, &egpu_kube_gpubudgets, k->all_ns ? NULL : k->ns, &items))
        goto done;
    budgets = egpu_calloc(json_array_size(items) + 1, sizeof(*budgets));
    v = egpu_calloc(json_array_size(items) + 1, sizeof(*v));
    if (budgets == NULL || v == NULL) {
        rc = emit(-ENOMEM, NULL);
        goto done;
    }
    json_array_foreach(items, i, o)
    {
        struct egpu_error err = {0};

        if (egpu_api_budget_decode(o, &budgets[n], &err)) {
            warn_skip("GPUBudget", o, &err);
            continue;
        }
        v[n] = &budgets[n];
        n++;
    }
    if (n == 0 && k->fmt != EGPU_KUBECTL_JSON) {
        fprintf(stderr, "No GPUBudgets found in %s.\n", ns_text(k));
        rc = 0;
    } else {
        rc = emit(egpu_kubectl_budgets(v, n, k->all_ns, k->fmt, &out), &out);
    }
done:
    json_decref(items);
    egpu_free(budgets);
    egpu_free(v);
    egpu_buf_free(&out);
    return rc;
}

int egpu_kubectl_main(int argc, char **argv)
{
    struct egpu_error err = {0};
    struct kp k;
    int rc;

    memset(&k, 0, sizeof(k));
    rc = parse(argc, argv, &k);
    if (rc >= 0)
        return rc;
    /* The client's own notes (a retried 429, a relisted page) are not for
     * the person reading a table. */
    egpu_log_level = EGPU_LOG_ERROR;
    if (egpu_kube_config_load(k.kubeconfig, k.context, &k.cfg, &err)) {
        fprintf(stderr, EGPU_KUBECTL_PROG ": %s\n", err.msg[0] ? err.msg : "no usable kubeconfig");
        return 1;
    }
    if (k.ns == NULL)
        k.ns = k.cfg->ns != NULL && k.cfg->ns[0] != '\0' ? k.cfg->ns : "default";
    if (egpu_kube_new(k.cfg, &k.kc, &err)) {
        fprintf(stderr, EGPU_KUBECTL_PROG ": %s\n", err.msg);
        egpu_kube_config_free(k.cfg);
        return 1;
    }
    switch (k.cmd) {
    case CMD_INSPECT:
        rc = run_inspect(&k);
        break;
    case CMD_CLAIMS:
        rc = run_claims(&k);
        break;
    default:
        rc = run_budget(&k);
        break;
    }
    egpu_kube_free(k.kc);
    egpu_kube_config_free(k.cfg);
    return rc;
}
