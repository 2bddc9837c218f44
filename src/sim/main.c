/* sim/main.c - egpu-sim: replay a GPU cluster trace through the placement core.
 *
 * Parses flags, loads the trace, runs every (policy, seed) replay on a pool of
 * threads, prints the table and writes the curve CSV and plot. Exit status:
 * 0 on success, 1 when --max-deviation is exceeded, 2 on bad flags or input.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "egpu/api.h"
#include "egpu/cli.h"
#include "egpu/sim.h"

#define POLICIES_MAX 16
#define SEEDS_MAX    1000

static const char usage[] =
    "Usage: egpu-sim [OPTION]...\n"
    "Replay a GPU cluster trace (the Alibaba openb trace by default) through Elastic GPU's\n"
    "placement core with the FGD paper's protocol, and report GPU allocation ratio,\n"
    "fragmentation and placement speed per policy.\n"
    "\n"
    "  --trace-dir DIR     trace directory (default: $EGPU_TRACE_DIR, else\n"
    "                      ../shared/data/openb, else data/openb)\n"
    "  --nodes FILE        node CSV in the trace directory\n"
    "                      (default openb_node_list_gpu_node.csv)\n"
    "  --pods FILE         pod CSV in the trace directory (default openb_pod_list_default.csv)\n"
    "  --workload-pods FILE  compute the FGD target workload from this pod CSV instead of\n"
    "                      the replayed one\n"
    "  --policy LIST       comma-separated policies, each NAME (both tiers) or NODE/CARD;\n"
    "                      names: " EGPU_POLICY_NAMES "; \"all\" = every\n"
    "                      name (default all); experimental FGD variants, egpu-sim\n"
    "                      only (docs/replay.md):\n"
    "                      " EGPU_POLICY_EXPERIMENTAL_NAMES "\n"
    "  --seeds LIST        seeds: N, A..B, or a comma-separated list (default 42)\n"
    "  --inflate F         grow arrivals to F x cluster GPU capacity (default 1.3)\n"
    "  --coverage F        share of pods the target workload covers, 0<F<=1 (default 0.95)\n"
    "  --reservations FILE pre-existing ElasticGPUs (a JSON list, or a List as kubectl get\n"
    "                      egpu -o json prints): their capacity is held before the first pod,\n"
    "                      counted as allocated and as arrived; spec.nodeName is a node's sn,\n"
    "                      gpuShare.gpuName / physicalGPU.gpuNames name its cards\n"
    "                      <sn>-gpu0..<sn>-gpu<gpu-1>; gpu-memory is ignored (the trace has none)\n"
    "  --unhealthy LIST    cards that take no new pod, as a GPU object that is not Healthy:\n"
    "                      comma-separated <sn>-gpu<index> (e.g. n-a-gpu0,n-a-gpu1)\n"
    "  --topology islands:N  every node's cards in NVLink islands of N (by index; the\n"
    "                      system between islands), as GPU objects' spec.topology would\n"
    "                      say, so containers of several whole cards get the best\n"
    "                      connected ones; prints how many lie inside one island at the\n"
    "                      end (default: no topology, as in the trace)\n"
    "  --dra               DRA mode: each pod's cards are what kube-scheduler's DRA\n"
    "                      allocator takes (first fit over the node's ResourceSlice devices,\n"
    "                      with backtracking, no scoring), the node is still the policy's\n"
    "                      (the extender's prioritize); labels get \"+dra\", no published\n"
    "                      rows; prints for how many placed pods the allocator's cards are\n"
    "                      not the ones the card tier would choose on the same node\n"
    "  --dra-order ORDER   with --dra, the slice's device order, one of:\n"
    "                      " EGPU_DRA_ORDER_NAMES "\n"
    "                      (default index, the agent's order: gpu-0, gpu-1, ...)\n"
    "  --dra-extender MODE with --dra, how the extender scores a node: blind (with its own\n"
    "                      card choice, as it does today; the default) or aware (with the\n"
    "                      card the allocator will take)\n"
    "  --node-sample HOW   which nodes each pod's policy chooses among, as kube-scheduler\n"
    "                      sends the extender: all (default; percentageOfNodesToScore:\n"
    "                      100), kube (its default at the trace's size: the first\n"
    "                      max(100, N x max(5, 50 - N/125) / 100) nodes that pass its own\n"
    "                      filters, CPU, memory and gpu-core summed per node, scanned\n"
    "                      round robin from where the last pod's scan stopped),\n"
    "                      kube:NODES (the share of the nodes a cluster of NODES would\n"
    "                      sample, e.g. kube:65000 = 5%), K (K such nodes) or P% (P percent\n"
    "                      of the nodes); no published rows; prints how many failed pods\n"
    "                      would have fit on a node outside their sample (docs/replay.md)\n"
    "  --card-dump FILE    write each replay's final state per card as CSV (policy, seed,\n"
    "                      node, card, capacity, reserved and pods' milli-GPU, pods); FILE\n"
    "                      may be in --out DIR, which is made first\n"
    "  --jobs N            replays run in parallel (default: online CPUs)\n"
    "  --out DIR           where the outputs go, made if missing (default out):\n"
    "                      replay_curve.csv (allocation and fragmentation per arrived\n"
    "                      percent), replay_runs.csv (one row per policy and seed),\n"
    "                      target_workload.json (the FGD target workload, as the\n"
    "                      TargetWorkload document egpu-scheduler --target-workload\n"
    "                      reads) and replay_curve.png (gnuplot)\n"
    "  --no-plot           do not draw the PNG\n"
    "  --idle-report       after the table, where the idle GPU lies at 100% arrived and at\n"
    "                      the end: usable by a trace pod, stranded by CPU/memory, by GPU\n"
    "                      model, or as card fragments no trace pod fits (docs/replay.md)\n"
    "  --max-deviation P   exit 1 if a policy with published figures is more than P points\n"
    "                      from the published allocation ratio at 100% arrived\n"
    "\n"
    "The FGD paper's figures (random, best-fit, fgd) and the difference to them are shown\n"
    "only for the trace they were published for: openb_node_list_gpu_node.csv (6,212 GPUs)\n"
    "with openb_pod_list_{default,cpu050,gpushare40,gpuspec10,multigpu20}.csv as shipped.\n"
    "  -h, --help          show this help\n"
    "  --version           show the version\n"
    "\n"
    "Exit status: 0 success, 1 deviation beyond --max-deviation, 2 bad flags or input.\n";

struct options {
    const char *trace_dir;
    const char *nodes;
    const char *pods;
    const char *workload_pods;
    const char *reservations;
    const char *card_dump;
    uint32_t topology_islands; /* --topology islands:N; 0 = none */
    const char *unhealthy;     /* --unhealthy LIST, or NULL */
    const char *out;
    double inflate;
    double coverage;
    double max_deviation; /* < 0: off */
    long jobs;
    bool plot;
    bool idle_report;              /* --idle-report */
    bool dra;                      /* --dra */
    enum egpu_dra_order dra_order; /* --dra-order */
    bool dra_blind;                /* --dra-extender blind (the default) */
    bool dra_flags;                /* --dra-order or --dra-extender given */
    struct egpu_sim_sample sample; /* --node-sample */
    const char *sample_arg;
    struct egpu_policy_runs policies[POLICIES_MAX];
    size_t npolicies;
    uint64_t seeds[SEEDS_MAX];
    size_t nseeds;
};

#define bad(...) egpu_cli_usage_error("egpu-sim", __VA_ARGS__)

static int parse_seeds(const char *arg, struct options *o)
{
    char buf[4096], *save = NULL;

    if (strlen(arg) >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, arg, strlen(arg) + 1);
    o->nseeds = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *dots = strstr(tok, "..");
        uint64_t a, b;

        if (dots != NULL) {
            *dots = '\0';
            if (egpu_cli_parse_u64(tok, 0, UINT64_MAX, &a) ||
                egpu_cli_parse_u64(dots + 2, 0, UINT64_MAX, &b) || b < a)
                return -EINVAL;
        } else if (egpu_cli_parse_u64(tok, 0, UINT64_MAX, &a) == 0) {
            b = a;
        } else {
            return -EINVAL;
        }
        for (uint64_t s = a; s <= b; s++) {
            if (o->nseeds == SEEDS_MAX)
                return -EINVAL;
            o->seeds[o->nseeds++] = s;
        }
    }
    return o->nseeds ? 0 : -EINVAL;
}

static int add_policy(struct options *o, const char *tok, struct egpu_error *err)
{
    struct egpu_policy_runs *p;
    char node[32], *slash;
    int rc;

    if (strcmp(tok, "all") == 0) {
        for (int i = 0; i < EGPU_POLICY_COUNT; i++) {
            rc = add_policy(o, egpu_policy_name((enum egpu_policy_kind)i), err);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (o->npolicies == POLICIES_MAX)
        return egpu_error_set(err, -EINVAL, "--policy: at most %d policies", POLICIES_MAX);
    p = &o->policies[o->npolicies];
    memset(p, 0, sizeof(*p));
    if (strlen(tok) >= sizeof(node))
        return egpu_error_set(err, -EINVAL, "--policy: \"%s\" is too long", tok);
    memcpy(node, tok, strlen(tok) + 1);
    slash = strchr(node, '/');
    if (slash != NULL)
        *slash = '\0';
    rc = egpu_policy_parse_experimental(node, &p->node_policy, err);
    if (rc == 0)
        rc = egpu_policy_parse_experimental(slash ? slash + 1 : node, &p->card_policy, err);
    if (rc)
        return egpu_error_prefix(err, rc, "--policy");
    if (p->node_policy == p->card_policy)
        snprintf(p->label, sizeof(p->label), "%s", egpu_policy_name(p->node_policy));
    else
        snprintf(p->label, sizeof(p->label), "%s/%s", egpu_policy_name(p->node_policy),
                 egpu_policy_name(p->card_policy));
    o->npolicies++;
    return 0;
}

static int parse_policies(const char *arg, struct options *o, struct egpu_error *err)
{
    char buf[1024], *save = NULL;

    if (strlen(arg) >= sizeof(buf))
        return egpu_error_set(err, -EINVAL, "--policy: list too long");
    memcpy(buf, arg, strlen(arg) + 1);
    o->npolicies = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int rc = add_policy(o, tok, err);

        if (rc)
            return rc;
    }
    if (o->npolicies == 0)
        return egpu_error_set(err, -EINVAL, "--policy: empty list");
    return 0;
}

/* Parse argv into *o. Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct options *o)
{
    enum {
        O_TRACE = 256,
        O_NODES,
        O_PODS,
        O_WPODS,
        O_POLICY,
        O_SEEDS,
        O_INFLATE,
        O_COVERAGE,
        O_JOBS,
        O_OUT,
        O_NOPLOT,
        O_MAXDEV,
        O_RESV,
        O_CARDS,
        O_UNHEALTHY,
        O_TOPOLOGY,
        O_DRA,
        O_DRA_ORDER,
        O_DRA_EXTENDER,
        O_IDLE,
        O_SAMPLE,
        O_VERSION
    };
    static const struct option longopts[] = {
        {"trace-dir", required_argument, NULL, O_TRACE},
        {"nodes", required_argument, NULL, O_NODES},
        {"pods", required_argument, NULL, O_PODS},
        {"workload-pods", required_argument, NULL, O_WPODS},
        {"policy", required_argument, NULL, O_POLICY},
        {"seeds", required_argument, NULL, O_SEEDS},
        {"inflate", required_argument, NULL, O_INFLATE},
        {"coverage", required_argument, NULL, O_COVERAGE},
        {"jobs", required_argument, NULL, O_JOBS},
        {"out", required_argument, NULL, O_OUT},
        {"no-plot", no_argument, NULL, O_NOPLOT},
        {"max-deviation", required_argument, NULL, O_MAXDEV},
        {"reservations", required_argument, NULL, O_RESV},
        {"card-dump", required_argument, NULL, O_CARDS},
        {"unhealthy", required_argument, NULL, O_UNHEALTHY},
        {"topology", required_argument, NULL, O_TOPOLOGY},
        {"dra", no_argument, NULL, O_DRA},
        {"dra-order", required_argument, NULL, O_DRA_ORDER},
        {"dra-extender", required_argument, NULL, O_DRA_EXTENDER},
        {"idle-report", no_argument, NULL, O_IDLE},
        {"node-sample", required_argument, NULL, O_SAMPLE},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    struct egpu_error err = {0};
    bool policies_given = false;
    uint64_t u;
    int c;

    o->nodes = "openb_node_list_gpu_node.csv";
    o->pods = "openb_pod_list_default.csv";
    o->out = "out";
    o->inflate = 1.3;
    o->coverage = 0.95;
    o->max_deviation = -1.0;
    o->jobs = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
    o->plot = true;
    o->dra_order = EGPU_DRA_ORDER_INDEX;
    o->dra_blind = true;
    o->seeds[0] = 42;
    o->nseeds = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case O_TRACE:
            o->trace_dir = optarg;
            break;
        case O_NODES:
            o->nodes = optarg;
            break;
        case O_PODS:
            o->pods = optarg;
            break;
        case O_WPODS:
            o->workload_pods = optarg;
            break;
        case O_POLICY:
            if (parse_policies(optarg, o, &err))
                return bad("%s", err.msg);
            policies_given = true;
            break;
        case O_SEEDS:
            if (parse_seeds(optarg, o))
                return bad("--seeds \"%s\": expected N, A..B or a comma-separated list of "
                           "non-negative integers (at most 1000 seeds)",
                           optarg);
            break;
        case O_INFLATE:
            if (egpu_cli_parse_double(optarg, 0.01, 100.0, &o->inflate))
                return bad("--inflate \"%s\": expected a number in 0.01..100", optarg);
            break;
        case O_COVERAGE:
            if (egpu_cli_parse_double(optarg, 1e-9, 1.0, &o->coverage))
                return bad("--coverage \"%s\": expected a number in (0, 1]", optarg);
            break;
        case O_JOBS:
            if (egpu_cli_parse_u64(optarg, 1, 256, &u))
                return bad("--jobs \"%s\": expected an integer in 1..256", optarg);
            o->jobs = (long)u;
            break;
        case O_OUT:
            o->out = optarg;
            break;
        case O_NOPLOT:
            o->plot = false;
            break;
        case O_IDLE:
            o->idle_report = true;
            break;
        case O_SAMPLE:
            if (egpu_sim_sample_parse(optarg, &o->sample, &err))
                return bad("--node-sample %s", err.msg);
            o->sample_arg = optarg;
            break;
        case O_MAXDEV:
            if (egpu_cli_parse_double(optarg, 0.0, 100.0, &o->max_deviation))
                return bad("--max-deviation \"%s\": expected points in 0..100", optarg);
            break;
        case O_RESV:
            o->reservations = optarg;
            break;
        case O_UNHEALTHY:
            o->unhealthy = optarg;
            break;
        case O_TOPOLOGY:
            if (strncmp(optarg, "islands:", 8) != 0 ||
                egpu_cli_parse_u64(optarg + 8, 1, EGPU_NODE_GPUS_MAX, &u))
                return bad("--topology \"%s\": expected islands:N with N in 1..%d", optarg,
                           EGPU_NODE_GPUS_MAX);
            o->topology_islands = (uint32_t)u;
            break;
        case O_CARDS:
            o->card_dump = optarg;
            break;
        case O_DRA:
            o->dra = true;
            break;
        case O_DRA_ORDER:
            if (egpu_dra_order_parse(optarg, &o->dra_order, &err))
                return bad("--dra-order \"%s\": expected one of " EGPU_DRA_ORDER_NAMES, optarg);
            o->dra_flags = true;
            break;
        case O_DRA_EXTENDER:
            if (strcmp(optarg, "blind") == 0 || strcmp(optarg, "aware") == 0)
                o->dra_blind = strcmp(optarg, "blind") == 0;
            else
                return bad("--dra-extender \"%s\": expected blind or aware", optarg);
            o->dra_flags = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        case O_VERSION:
            fputs(EGPU_VERSION_LINE("egpu-sim"), stdout);
            return 0;
        default:
            return bad("unknown or incomplete option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad("unexpected argument \"%s\"", argv[optind]);
    if (o->dra_flags && !o->dra)
        return bad("--dra-order and --dra-extender need --dra");
    if (!policies_given && parse_policies("all", o, &err))
        return bad("%s", err.msg);
    for (size_t i = 0; o->dra && i < o->npolicies; i++) {
        struct egpu_policy_runs *p = &o->policies[i];
        size_t len = strlen(p->label);

        snprintf(p->label + len, sizeof(p->label) - len, "+dra");
    }
    return -1;
}

/* --card-dump: rows from every replay's thread into one file. */
struct card_dump {
    FILE *f; /* NULL without --card-dump */
    pthread_mutex_t lock;
    bool header_done;
    bool count_islands; /* --topology: count the containers below */
    uint64_t multi;     /* containers on 2+ whole cards at the end of a replay */
    uint64_t in_island; /* of which every pair of cards is joined by NVLink */
};

/* Containers of c on 2+ whole cards, and those inside one NVLink island. */
static void count_islands(const struct egpu_cluster *c, uint64_t *multi, uint64_t *in_island)
{
    for (size_t i = 0; i < c->nnodes; i++) {
        const struct egpu_node *n = c->nodes[i];

        for (const struct egpu_assignment *a = n->pods; a != NULL; a = a->next) {
            for (uint32_t s = 0; s < a->nshares; s++) {
                uint32_t k = 0;
                bool inside = true;

                if (a->shares[s].core_milli != EGPU_GPU_MILLI ||
                    (s > 0 && a->shares[s - 1].container == a->shares[s].container))
                    continue; /* a share, or not the container's first card */
                for (uint32_t t = s;
                     t < a->nshares && a->shares[t].container == a->shares[s].container; t++, k++) {
                    for (uint32_t u = s; u < t; u++)
                        inside = inside && n->gpus[a->shares[t].gpu].link[a->shares[u].gpu] ==
                                               EGPU_TOPO_NVLINK;
                }
                *multi += k > 1;
                *in_island += k > 1 && inside;
            }
        }
    }
}

static void dump_cards(void *ud, const struct egpu_replay_config *cfg, const struct egpu_cluster *c)
{
    struct card_dump *d = ud;
    char label[64];

    if (cfg->node_policy == cfg->card_policy)
        snprintf(label, sizeof(label), "%s%s", egpu_policy_name(cfg->node_policy),
                 cfg->dra ? "+dra" : "");
    else
        snprintf(label, sizeof(label), "%s/%s%s", egpu_policy_name(cfg->node_policy),
                 egpu_policy_name(cfg->card_policy), cfg->dra ? "+dra" : "");
    pthread_mutex_lock(&d->lock);
    if (d->f != NULL) {
        egpu_sim_card_rows(d->f, label, cfg->seed, c, !d->header_done);
        d->header_done = true;
    }
    if (d->count_islands)
        count_islands(c, &d->multi, &d->in_island);
    pthread_mutex_unlock(&d->lock);
}

struct pool {
    const struct egpu_trace *trace;
    const struct egpu_workload *workload;
    const struct egpu_sim_reservations *reservations;
    struct card_dump *cards; /* NULL without --card-dump */
    struct options *o;
    atomic_size_t next;
    pthread_mutex_t lock;
    int rc;
    struct egpu_error err;
};

static void *worker(void *arg)
{
    struct pool *pool = arg;
    struct options *o = pool->o;
    const size_t total = o->npolicies * o->nseeds;

    for (;;) {
        size_t k = atomic_fetch_add(&pool->next, 1);
        struct egpu_policy_runs *p;
        struct egpu_replay_config cfg;
        struct egpu_error err = {0};
        int rc;

        if (k >= total)
            break;
        p = &o->policies[k / o->nseeds];
        cfg = (struct egpu_replay_config){
            .node_policy = p->node_policy,
            .card_policy = p->card_policy,
            .seed = o->seeds[k % o->nseeds],
            .inflate = o->inflate,
            .workload = pool->workload,
            .reservations = pool->reservations,
            .dra = o->dra,
            .dra_order = o->dra_order,
            .dra_blind = o->dra_blind,
            .final = pool->cards != NULL ? dump_cards : NULL,
            .final_ud = pool->cards,
            .sample = o->sample,
        };
        rc = egpu_replay_run(pool->trace, &cfg, &p->runs[k % o->nseeds], &err);
        if (rc) {
            pthread_mutex_lock(&pool->lock);
            if (pool->rc == 0) {
                pool->rc = rc;
                pool->err = err;
            }
            pthread_mutex_unlock(&pool->lock);
            atomic_store(&pool->next, total); /* stop the others early */
        }
    }
    return NULL;
}

static int run_pool(struct pool *pool, long jobs)
{
    pthread_t threads[256];
    long started = 0;

    pthread_mutex_init(&pool->lock, NULL);
    for (; started < jobs; started++) {
        if (pthread_create(&threads[started], NULL, worker, pool) != 0)
            break;
    }
    if (started == 0)
        worker(pool); /* no threads to be had: run here */
    for (long i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    pthread_mutex_destroy(&pool->lock);
    return pool->rc;
}

/* w as the TargetWorkload document egpu-scheduler --target-workload reads
 * (egpu/api.h), model ids named from c's table; NULL when out of memory. */
static json_t *target_document(const struct egpu_workload *w, const struct egpu_cluster *c)
{
    struct egpu_api_workload t = {.n = w->n, .pods = egpu_calloc(w->n ? w->n : 1, sizeof(*t.pods))};
    json_t *doc = NULL;

    for (size_t i = 0; t.pods != NULL && i < w->n; i++) {
        struct egpu_api_typical_pod *p = &t.pods[i];
        size_t len = 0;

        *p = (struct egpu_api_typical_pod){.cpu_milli = w->pods[i].cpu_milli,
                                           .gpu_milli = w->pods[i].gpu_milli,
                                           .gpus = w->pods[i].ncards,
                                           .weight = w->pods[i].weight};
        for (int m = 0; m < EGPU_MODELS_MAX; m++) {
            if (!(w->pods[i].model_mask >> m & 1) || c->models[m] == NULL)
                continue;
            len += (size_t)snprintf(p->models + len,
                                    len < sizeof(p->models) ? sizeof(p->models) - len : 0, "%s%s",
                                    len ? "|" : "", c->models[m]);
        }
        if (len >= sizeof(p->models)) {
            egpu_free(t.pods);
            return NULL;
        }
    }
    if (t.pods != NULL)
        doc = egpu_api_workload_encode(&t);
    egpu_free(t.pods);
    return doc;
}

/* The workload's pods as requests against a cluster built like each replay's;
 * *doc: the same as a TargetWorkload document (a new reference). */
static int build_workload(const struct egpu_trace *t, const char *workload_csv,
                          const char *node_csv, double coverage, struct egpu_workload *w,
                          json_t **doc, struct egpu_error *err)
{
    struct egpu_trace wt = {0};
    const struct egpu_trace *src = t;
    struct egpu_pod_request *reqs = NULL;
    struct egpu_cluster *c = NULL;
    int rc;

    if (workload_csv != NULL) {
        rc = egpu_trace_load(node_csv, workload_csv, &wt, err);
        if (rc)
            return rc;
        src = &wt;
    }
    /* Model ids: the replay's nodes first, then its pods' specs, then these. */
    rc = egpu_trace_cluster(t, &c, err);
    if (rc)
        goto out;
    for (size_t i = 0; i < t->npods && rc == 0; i++) {
        struct egpu_pod_request r;

        rc = egpu_trace_request(c, &t->pods[i], &r, err);
    }
    reqs = egpu_calloc(src->npods, sizeof(*reqs));
    if (rc == 0 && reqs == NULL)
        rc = egpu_error_set(err, -ENOMEM, "workload: out of memory");
    for (size_t i = 0; i < src->npods && rc == 0; i++)
        rc = egpu_trace_request(c, &src->pods[i], &reqs[i], err);
    if (rc == 0) {
        rc = egpu_workload_from_requests(reqs, src->npods, coverage, w);
        if (rc)
            egpu_error_set(err, rc, "workload: %s", egpu_strerror(rc));
    }
    if (rc == 0 && (*doc = target_document(w, c)) == NULL)
        rc = egpu_error_set(err, -ENOMEM, "workload: out of memory");
out:
    egpu_free(reqs);
    egpu_cluster_free(c);
    egpu_trace_free(&wt);
    return rc;
}

static int check_deviation(const struct options *o)
{
    size_t checked = 0;
    int status = 0;

    for (size_t i = 0; i < o->npolicies; i++) {
        const struct egpu_policy_runs *p = &o->policies[i];
        const double *paper = p->published;
        double v;
        bool ok;

        if (paper == NULL)
            continue;
        checked++;
        v = egpu_replay_alloc_at(p->runs, p->nruns, 100);
        ok = v >= 0 && fabs(v - paper[2]) <= o->max_deviation;
        if (v < 0)
            printf("check %-10s alloc@100 - (no pod arrived near 100%%) published %.2f%%: FAIL\n",
                   p->label, paper[2]);
        else
            printf("check %-10s alloc@100 %.2f%% published %.2f%% difference %+.2f points "
                   "(allowed %.2f): %s\n",
                   p->label, v, paper[2], v - paper[2], o->max_deviation, ok ? "ok" : "FAIL");
        if (!ok)
            status = 1;
    }
    if (checked == 0)
        printf("check: nothing to check: no figures were published for these policies on "
               "%s with %s\n",
               o->pods, o->nodes);
    return status;
}

int main(int argc, char **argv)
{
    static struct options o;
    struct egpu_trace trace = {0};
    struct egpu_workload workload = {0};
    json_t *target = NULL; /* the workload as a TargetWorkload document */
    struct egpu_sim_reservations resv = {0};
    struct card_dump cards = {0};
    struct egpu_error err = {0};
    struct pool pool = {0};
    char dir[4096], node_csv[8192], pod_csv[8192], wl_csv[8192], path[8192];
    struct rusage ru;
    double t0 = egpu_sim_now(), wall;
    uint64_t ngpus = 0;
    int status = parse_args(argc, argv, &o);

    if (status >= 0)
        return status;
    status = 2;
    if (egpu_trace_find_dir(o.trace_dir, dir, sizeof(dir), &err))
        goto fail;
    snprintf(node_csv, sizeof(node_csv), "%s/%s", dir, o.nodes);
    snprintf(pod_csv, sizeof(pod_csv), "%s/%s", dir, o.pods);
    if (o.workload_pods)
        snprintf(wl_csv, sizeof(wl_csv), "%s/%s", dir, o.workload_pods);
    if (egpu_trace_load(node_csv, pod_csv, &trace, &err))
        goto fail;
    if (o.unhealthy != NULL && egpu_trace_mark_unhealthy(&trace, o.unhealthy, &err))
        goto fail;
    trace.topology_islands = o.topology_islands;
    if (build_workload(&trace, o.workload_pods ? wl_csv : NULL, node_csv, o.coverage, &workload,
                       &target, &err))
        goto fail;
    for (size_t i = 0; i < trace.nnodes; i++)
        ngpus += trace.nodes[i].ngpus;
    printf("egpu-sim: trace %s: %zu nodes, %llu GPUs, %zu pods (%s)\n", dir, trace.nnodes,
           (unsigned long long)ngpus, trace.npods, o.pods);
    if (o.unhealthy != NULL) {
        uint64_t bad = 0;

        for (size_t i = 0; i < trace.nnodes; i++)
            bad += (uint64_t)__builtin_popcountll(trace.nodes[i].unhealthy);
        printf("egpu-sim: --unhealthy: %llu cards take no new pod\n", (unsigned long long)bad);
    }
    if (o.reservations != NULL) {
        if (egpu_sim_reservations_load(o.reservations, &trace, &resv, &err))
            goto fail;
        printf("egpu-sim: reservations %s: %zu ElasticGPUs, %zu holding %llu milli-GPU = "
               "%.2f%% of the cluster's GPU capacity (%llu milli-GPU), counted as allocated and "
               "as arrived before the first pod%s\n",
               o.reservations, resv.nobjects, resv.n, (unsigned long long)resv.core_milli,
               ngpus ? 100.0 * (double)resv.core_milli / (1000.0 * (double)ngpus) : 0.0,
               (unsigned long long)(1000 * ngpus),
               resv.memory_dropped ? "; gpu-memory ignored (the trace has none)" : "");
    }
    /* --out first: --card-dump may name a file in it (out/cards.csv). */
    if (mkdir(o.out, 0777) != 0 && errno != EEXIST) {
        egpu_error_errno(&err, "--out %s", o.out);
        goto fail;
    }
    if (o.card_dump != NULL) {
        cards.f = fopen(o.card_dump, "w");
        if (cards.f == NULL) {
            egpu_error_errno(&err, "--card-dump %s", o.card_dump);
            goto fail;
        }
    }
    if (o.card_dump != NULL || o.topology_islands > 0) {
        pthread_mutex_init(&cards.lock, NULL);
        cards.count_islands = o.topology_islands > 0;
        pool.cards = &cards;
    }
    if (o.topology_islands > 0)
        printf("egpu-sim: --topology: every node's cards in NVLink islands of %u\n",
               o.topology_islands);
    if (o.dra)
        printf("egpu-sim: --dra: cards as kube-scheduler's DRA allocator takes them (first fit "
               "over each node's devices in %s order); nodes by the policy, the extender %s\n",
               egpu_dra_order_name(o.dra_order),
               o.dra_blind ? "blind to the allocator's cards (scoring its own)"
                           : "aware of the allocator's cards");
    if (o.sample.mode != EGPU_SIM_SAMPLE_ALL) {
        size_t want = egpu_sim_sample_want(&o.sample, trace.nnodes);

        printf("egpu-sim: --node-sample %s: each pod's policy chooses among the first %zu of "
               "the %zu nodes (%.1f%%) that pass kube-scheduler's own filters (CPU, memory, "
               "gpu-core per node), scanned round robin from where the last pod's scan stopped\n",
               o.sample_arg, want, trace.nnodes,
               trace.nnodes ? 100.0 * (double)want / (double)trace.nnodes : 0.0);
    }
    printf("egpu-sim: target workload: %zu typical pods covering %.0f%% of %s; inflate %.2fx; "
           "%zu seed(s) from %llu; %zu policies; %ld jobs\n\n",
           workload.n, 100.0 * o.coverage, o.workload_pods ? o.workload_pods : o.pods, o.inflate,
           o.nseeds, (unsigned long long)o.seeds[0], o.npolicies, o.jobs);
    fflush(stdout);
    for (size_t i = 0; i < o.npolicies; i++) {
        o.policies[i].nruns = o.nseeds;
        /* Published for the whole cluster and FGD's card choice: not for
         * one with cards out, the DRA allocator's cards or a node sample. */
        o.policies[i].published =
            o.unhealthy != NULL || o.dra || o.sample.mode != EGPU_SIM_SAMPLE_ALL
                ? NULL
                : egpu_replay_published(o.nodes, ngpus, o.pods, trace.npods,
                                        o.policies[i].node_policy, o.policies[i].card_policy);
        o.policies[i].runs = egpu_calloc(o.nseeds, sizeof(*o.policies[i].runs));
        if (o.policies[i].runs == NULL) {
            egpu_error_set(&err, -ENOMEM, "out of memory");
            goto fail;
        }
    }
    pool.trace = &trace;
    pool.workload = &workload;
    pool.reservations = &resv;
    pool.o = &o;
    if (run_pool(&pool, o.jobs)) {
        err = pool.err;
        goto fail;
    }
    wall = egpu_sim_now() - t0;
    egpu_report_table(stdout, o.policies, o.npolicies);
    if (o.idle_report) {
        printf("\n");
        egpu_report_idle(stdout, o.policies, o.npolicies, 1000 * ngpus);
    }
    for (size_t i = 0; o.dra && i < o.npolicies; i++) {
        const struct egpu_policy_runs *p = &o.policies[i];
        size_t other = 0, placed = 0;

        for (size_t s = 0; s < p->nruns; s++) {
            other += p->runs[s].dra_other_cards;
            placed += p->runs[s].arrivals - p->runs[s].failed;
        }
        if (i == 0)
            printf("\n");
        printf("egpu-sim: --dra: %s: the allocator's cards are not the ones %s's card tier "
               "would choose on the same node for %zu of %zu placed pods (%.2f%%)\n",
               p->label, egpu_policy_name(p->card_policy), other, placed,
               placed ? 100.0 * (double)other / (double)placed : 0.0);
    }
    for (size_t i = 0; o.sample.mode != EGPU_SIM_SAMPLE_ALL && i < o.npolicies; i++) {
        const struct egpu_policy_runs *p = &o.policies[i];
        size_t missed = 0, failed = 0;

        for (size_t s = 0; s < p->nruns; s++) {
            missed += p->runs[s].sample_missed;
            failed += p->runs[s].failed;
        }
        if (i == 0)
            printf("\n");
        printf("egpu-sim: --node-sample %s: %s: %zu of %zu failed pods would have fit on a node "
               "outside their sample (kube-scheduler would retry them; the replay does not)\n",
               o.sample_arg, p->label, missed, failed);
    }
    if (o.topology_islands > 0)
        printf("\negpu-sim: --topology islands:%u: %llu of %llu containers on several whole "
               "cards at the end of the replays lie inside one NVLink island\n",
               o.topology_islands, (unsigned long long)cards.in_island,
               (unsigned long long)cards.multi);
    snprintf(path, sizeof(path), "%s/replay_curve.csv", o.out);
    if (egpu_report_csv(path, o.policies, o.npolicies, &err))
        goto fail;
    snprintf(path, sizeof(path), "%s/replay_runs.csv", o.out);
    if (egpu_report_summary_csv(path, o.policies, o.npolicies, o.seeds, &err))
        goto fail;
    snprintf(path, sizeof(path), "%s/target_workload.json", o.out);
    if (json_dump_file(target, path, JSON_INDENT(1) | JSON_REAL_PRECISION(17)) != 0) {
        egpu_error_set(&err, -EIO, "%s: write failed", path);
        goto fail;
    }
    printf("\nwrote %s/replay_curve.csv, %s/replay_runs.csv, %s/target_workload.json", o.out, o.out,
           o.out);
    if (o.card_dump != NULL)
        printf(", %s", o.card_dump);
    if (o.plot) {
        char csv[8192];

        snprintf(csv, sizeof(csv), "%s/replay_curve.csv", o.out);
        snprintf(path, sizeof(path), "%s/replay_curve.png", o.out);
        if (egpu_report_plot(csv, path, o.policies, o.npolicies, &err) == 0)
            printf(", %s", path);
        else
            printf("\negpu-sim: no plot: %s", err.msg);
    }
    getrusage(RUSAGE_SELF, &ru);
    printf("\nwall %.2f s, peak memory %.1f MiB\n", wall, (double)ru.ru_maxrss / 1024.0);
    status = o.max_deviation >= 0 ? check_deviation(&o) : 0;
    goto out;
fail:
    fprintf(stderr, "egpu-sim: %s\n", err.msg[0] ? err.msg : egpu_strerror(err.code));
out:
    if (cards.f != NULL && fclose(cards.f) != 0 && status == 0) {
        fprintf(stderr, "egpu-sim: --card-dump %s: %s\n", o.card_dump, strerror(errno));
        status = 2;
    }
    if (pool.cards != NULL)
        pthread_mutex_destroy(&cards.lock);
    egpu_sim_reservations_free(&resv);
    for (size_t i = 0; i < o.npolicies; i++)
        egpu_free(o.policies[i].runs);
    egpu_workload_free(&workload);
    json_decref(target);
    egpu_trace_free(&trace);
    return status;
}
