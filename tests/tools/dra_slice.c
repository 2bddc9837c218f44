/* tests/tools/dra_slice.c - the agent's ResourceSlice (src/agent/dra_slice.c)
 * for fake cards, printed or published, for
 * tests/integration/test_cluster_dra_slice.py (test code, never shipped).
 *
 *   egpu-dra-slice --node NODE --fake-gpus SPEC [--driver-version V]
 *                  [--cuda-driver-version N] [--node-uid UID] [--attributes]
 *                  [--taint-unhealthy] (--print | --kubeconfig PATH STEP...)
 *
 * The cards come from the agent's fake backend (egpu_gpus_open_fake,
 * egpu_gpus_list), as egpu-agent --fake-gpus lists them. --attributes fills
 * the optional attributes from the backend (egpu__dra_slice_attributes,
 * over --driver-version and --cuda-driver-version); --taint-unhealthy sets
 * the config's taint_unhealthy. --print writes the
 * slice egpu__dra_slice_build gives at generation 1 on stdout. With
 * --kubeconfig, each STEP in order:
 *   publish        egpu__dra_slice_publish (one state for the whole run),
 *                  then one JSON line on stdout: {"rc", "error", "created",
 *                  "updated", "deleted", "unchanged", "devices",
 *                  "generation", "name", "dropped"}
 *   unhealthy:I    card I marked unhealthy (egpu_gpus_fake_set_health)
 *   healthy:I      card I healthy again
 *   pause          wait for a line on stdin (the test changes the cluster)
 * The agent's log goes to stderr. Exit status 0, 1 when a step failed, 2
 * for a bad command line.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dra_slice_int.h"
#include "egpu/log.h"

struct tool {
    struct egpu__dra_slice_config cfg;
    struct egpu__dra_slice_attrs attrs;
    struct egpu__dra_slice_state st;
    struct egpu_gpus *gpus;
    struct egpu_kube *kc;
};

static int usage(void)
{
    fprintf(stderr, "usage: egpu-dra-slice --node NODE --fake-gpus SPEC [--driver-version V] "
                    "[--cuda-driver-version N] [--node-uid UID] [--attributes] "
                    "[--taint-unhealthy] (--print | --kubeconfig PATH STEP...)\n");
    return 2;
}

static int list_cards(struct tool *t, struct egpu_gpu_info *cards, size_t *n,
                      struct egpu_error *err)
{
    return egpu_gpus_list(t->gpus, cards, EGPU_NODE_GPUS_MAX, n, err);
}

static int print_slice(struct tool *t)
{
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    json_t *obj = NULL;
    size_t n = 0;
    int rc = list_cards(t, cards, &n, &err);

    if (rc == 0)
        rc = egpu__dra_slice_build(&t->cfg, cards, n, 1, &obj, &err);
    if (rc) {
        fprintf(stderr, "egpu-dra-slice: %s\n", err.msg);
        return 1;
    }
    json_dumpf(obj, stdout, JSON_INDENT(1) | JSON_SORT_KEYS);
    fputc('\n', stdout);
    json_decref(obj);
    return 0;
}

static int publish(struct tool *t)
{
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu__dra_slice_stats s = {0};
    struct egpu_error err = {0};
    size_t n = 0;
    json_t *line;
    int rc = list_cards(t, cards, &n, &err);

    if (rc == 0)
        rc = egpu__dra_slice_publish(t->kc, &t->st, &t->cfg, cards, n, &s, &err);
    line = json_pack("{s:i, s:s, s:i, s:i, s:i, s:i, s:i, s:I, s:s, s:s}", "rc", rc, "error",
                     rc ? err.msg : "", "created", (int)s.created, "updated", (int)s.updated,
                     "deleted", (int)s.deleted, "unchanged", (int)s.unchanged, "devices",
                     (int)s.devices, "generation", (json_int_t)s.generation, "name", s.name,
                     "dropped", s.dropped);
    json_dumpf(line, stdout, JSON_COMPACT);
    fputc('\n', stdout);
    fflush(stdout);
    json_decref(line);
    return rc ? 1 : 0;
}

static int step(struct tool *t, const char *s)
{
    struct egpu_error err = {0};
    char line[64];

    if (strcmp(s, "publish") == 0)
        return publish(t);
    if (strcmp(s, "pause") == 0)
        return fgets(line, sizeof(line), stdin) != NULL ? 0 : 1;
    if (strncmp(s, "unhealthy:", 10) == 0 || strncmp(s, "healthy:", 8) == 0) {
        bool healthy = s[0] == 'h';
        char *end;
        unsigned long i = strtoul(strchr(s, ':') + 1, &end, 10);

        if (*end != '\0' ||
            egpu_gpus_fake_set_health(t->gpus, (uint32_t)i, healthy, "XID 79", &err) != 0) {
            fprintf(stderr, "egpu-dra-slice: %s: %s\n", s, err.msg);
            return 1;
        }
        return 0;
    }
    fprintf(stderr, "egpu-dra-slice: unknown step %s\n", s);
    return 2;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"node", required_argument, NULL, 'n'},
        {"fake-gpus", required_argument, NULL, 'f'},
        {"driver-version", required_argument, NULL, 'd'},
        {"cuda-driver-version", required_argument, NULL, 'c'},
        {"node-uid", required_argument, NULL, 'u'},
        {"kubeconfig", required_argument, NULL, 'k'},
        {"print", no_argument, NULL, 'p'},
        {"attributes", no_argument, NULL, 'a'},
        {"taint-unhealthy", no_argument, NULL, 't'},
        {NULL, 0, NULL, 0},
    };
    struct tool t = {0};
    struct egpu_kube_config *kcfg = NULL;
    struct egpu_error err = {0};
    const char *spec = NULL, *kubeconfig = NULL;
    bool print = false, attributes = false;
    int c, rc = 0;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            t.cfg.node = optarg;
            break;
        case 'f':
            spec = optarg;
            break;
        case 'd':
            t.cfg.driver_version = optarg;
            break;
        case 'c':
            t.cfg.cuda_driver_version = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'u':
            t.cfg.node_uid = optarg;
            break;
        case 'k':
            kubeconfig = optarg;
            break;
        case 'p':
            print = true;
            break;
        case 'a':
            attributes = true;
            break;
        case 't':
            t.cfg.taint_unhealthy = true;
            break;
        default:
            return usage();
        }
    }
    if (t.cfg.node == NULL || spec == NULL || print == (kubeconfig != NULL))
        return usage();
    egpu_log_set_component("egpu-dra-slice");
    if (egpu_gpus_open_fake(spec, t.cfg.node, &t.gpus, &err) != 0) {
        fprintf(stderr, "egpu-dra-slice: %s\n", err.msg);
        return 2;
    }
    if (attributes) {
        struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
        size_t n = 0;

        if (list_cards(&t, cards, &n, &err) != 0) {
            fprintf(stderr, "egpu-dra-slice: %s\n", err.msg);
            rc = 2;
            goto out;
        }
        egpu__dra_slice_attributes(t.gpus, cards, n, &t.attrs, &t.cfg);
    }
    if (print) {
        rc = print_slice(&t);
        goto out;
    }
    if (egpu_kube_config_from_kubeconfig(kubeconfig, NULL, &kcfg, &err) != 0 ||
        egpu_kube_new(kcfg, &t.kc, &err) != 0) {
        fprintf(stderr, "egpu-dra-slice: %s\n", err.msg);
        rc = 2;
        goto out;
    }
    for (int i = optind; i < argc && rc == 0; i++)
        rc = step(&t, argv[i]);
out:
    egpu__dra_slice_state_close(&t.st);
    egpu_kube_free(t.kc);
    egpu_kube_config_free(kcfg);
    egpu_gpus_free(t.gpus);
    return rc;
}
