/* controller/place.c - where a claim is provisioned (egpu/controller.h).
 *
 * The claim becomes a one-container pod request (a share of one card, or k
 * whole cards) and the placement core chooses node and card(s) with the
 * class's policy, exactly as the scheduler would place a pod of that shape.
 * A gpu-tflops claim needs a different percent on each model, so it is
 * placed one model at a time: the model where it needs the largest percent
 * (the smallest card that can hold it) first.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/controller.h"

struct model_try {
    int id;
    const char *name;
    int64_t pct;
};

static int by_pct_desc(const void *a, const void *b)
{
    const struct model_try *x = a, *y = b;

    if (x->pct != y->pct)
        return x->pct > y->pct ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Place r in inv with cls's policy; fill out's node and cards. */
static int schedule(struct egpu_controller_inventory *inv, const struct egpu_api_claim *c,
                    const struct egpu_api_class *cls, const struct egpu_pod_request *r,
                    struct egpu_controller_choice *out, struct egpu_error *err)
{
    enum egpu_policy_kind pol = cls != NULL && cls->has_policy ? cls->policy : EGPU_POLICY_BINPACK;
    struct egpu_typical_pod shape = {.gpu_milli = r->containers[0].core_milli,
                                     .ncards = r->containers[0].ncards,
                                     .model_mask = r->model_mask,
                                     .weight = 1};
    struct egpu_workload w = {0};
    struct egpu_placer_config pc = {
        .node_policy = pol, .card_policy = pol, .seed = egpu_hash_str(c->meta.uid, 0)};
    struct egpu_placer *p;
    struct egpu_node *node = NULL;
    struct egpu_pick pick;
    int rc;

    if (egpu_policy_needs_workload(pol)) {
        rc = egpu_workload_from_list(&shape, 1, &w);
        if (rc)
            return egpu_error_set(err, rc, "placement: %s", egpu_strerror(rc));
        pc.workload = &w;
    }
    p = egpu_placer_new(&pc, err);
    if (p == NULL) {
        egpu_workload_free(&w);
        return err != NULL && err->code ? err->code : -ENOMEM;
    }
    rc = egpu_placer_schedule(p, inv->cluster, r, &node, &pick);
    egpu_placer_free(p);
    egpu_workload_free(&w);
    if (rc)
        return rc;
    snprintf(out->node, sizeof(out->node), "%s", node->name);
    out->ngpus = 0;
    for (uint32_t i = 0; i < pick.nshares; i++) {
        const struct egpu_controller_card *card =
            egpu_map_get(inv->by_uuid, node->gpus[pick.shares[i].gpu].uuid);

        if (card == NULL)
            return egpu_error_set(err, -EPROTO, "placement chose a card the inventory lacks");
        snprintf(out->gpu_names[out->ngpus++], EGPU_K8S_NAME_MAX, "%s", card->name);
        snprintf(out->model, sizeof(out->model), "%s", card->model);
    }
    return 0;
}

static const char *class_name(const struct egpu_api_class *cls)
{
    return cls != NULL ? cls->meta.name : "(none)";
}

static int no_fit(const struct egpu_controller_inventory *inv, const struct egpu_api_claim *c,
                  const struct egpu_api_class *cls, int64_t pct, struct egpu_error *err)
{
    char mem[48] = "";

    if (c->has_mem)
        snprintf(mem, sizeof(mem), " and %" PRId64 " MiB", c->mem_mib);
    if (pct >= 100)
        return egpu_error_set(err, EGPU_ENOFIT,
                              "no node has %" PRId64 " whole free card(s) among the %zu cards "
                              "class %s may use",
                              pct / 100, inv->ncards, class_name(cls));
    return egpu_error_set(err, EGPU_ENOFIT,
                          "no card has %" PRId64 "%% of its compute%s free among the %zu cards "
                          "class %s may use",
                          pct, mem, inv->ncards, class_name(cls));
}

static int place_tflops(struct egpu_controller_inventory *inv, const struct egpu_api_claim *c,
                        const struct egpu_api_class *cls, struct egpu_pod_request *r,
                        struct egpu_controller_choice *out, struct egpu_error *err)
{
    struct model_try tries[EGPU_MODELS_MAX];
    struct egpu_error first = {0};
    size_t n = 0;
    int rc;

    for (uint16_t m = 0; m < inv->cluster->nmodels; m++) {
        int64_t peak = cls != NULL ? egpu_api_class_peak(cls, inv->cluster->models[m]) : 0;
        int64_t pct;
        struct egpu_error e = {0};

        if (peak == 0)
            continue;
        if (egpu_api_tflops_to_core(c->tflops_milli, peak, &pct, &e) != 0) {
            if (first.code == 0)
                first = e;
            continue;
        }
        tries[n++] = (struct model_try){m, inv->cluster->models[m], pct};
    }
    if (n == 0 && first.code != 0)
        return egpu_error_set(err, EGPU_ERANGE, "%s on every card class %s may use", first.msg,
                              class_name(cls));
    if (n == 0)
        return egpu_error_set(err, EGPU_ERANGE,
                              "class %s has no tflops.<model> parameter for any of the %zu "
                              "cards it may use",
                              class_name(cls), inv->ncards);
    qsort(tries, n, sizeof(tries[0]), by_pct_desc);
    for (size_t i = 0; i < n; i++) {
        r->model_mask = (uint64_t)1 << tries[i].id;
        r->containers[0].core_milli = (uint32_t)tries[i].pct * 10;
        rc = schedule(inv, c, cls, r, out, err);
        if (rc != EGPU_ENOFIT) {
            out->core_pct = tries[i].pct;
            out->from_tflops = true;
            return rc;
        }
    }
    return no_fit(inv, c, cls, tries[n - 1].pct, err);
}

static int kind_error(const struct egpu_api_class *cls, enum egpu_api_provisioner kind,
                      struct egpu_error *err)
{
    return egpu_error_set(err, EGPU_ERANGE, "the claim asks %s but class %s provisions %s",
                          kind == EGPU_API_PROVISIONER_PHYSICAL ? "whole cards"
                                                                : "a share of one card",
                          cls->meta.name,
                          cls->provisioner == EGPU_API_PROVISIONER_PHYSICAL
                              ? "whole cards (" EGPU_PROVISIONER_PHYSICAL ")"
                              : "shares of one card (" EGPU_PROVISIONER_GPUSHARE ")");
}

int egpu_controller_place(struct egpu_controller_inventory *inv, const struct egpu_api_claim *c,
                          const struct egpu_api_class *cls, struct egpu_controller_choice *out,
                          struct egpu_error *err)
{
    enum egpu_api_provisioner kind =
        c->core_pct >= 100 ? EGPU_API_PROVISIONER_PHYSICAL : EGPU_API_PROVISIONER_GPUSHARE;
    struct egpu_pod_request r = {.ncontainers = 1};
    int rc;

    memset(out, 0, sizeof(*out));
    if (cls != NULL && cls->provisioner != kind)
        return kind_error(cls, kind, err);
    out->source = kind;
    out->mem_mib = c->has_mem ? c->mem_mib : 0;
    if (kind == EGPU_API_PROVISIONER_PHYSICAL)
        r.containers[0] =
            (struct egpu_container_request){EGPU_GPU_MILLI, (uint32_t)(c->core_pct / 100), 0};
    else
        r.containers[0] =
            (struct egpu_container_request){(uint32_t)c->core_pct * 10, 1, (uint32_t)out->mem_mib};
    if (c->tflops_milli > 0)
        return place_tflops(inv, c, cls, &r, out, err);
    out->core_pct = c->core_pct;
    rc = schedule(inv, c, cls, &r, out, err);
    if (rc == EGPU_ENOFIT)
        return no_fit(inv, c, cls, c->core_pct, err);
    return rc;
}

/* The key a selection is tried under: never an ElasticGPU's (no name holds
 * a parenthesis) nor a pod's. */
#define TRIAL_KEY EGPU_CONTROLLER_RESV_PREFIX "(selection)"

int egpu_controller_place_at(struct egpu_controller_inventory *inv, const struct egpu_api_claim *c,
                             const struct egpu_api_class *cls, const char *node, const char *gpus,
                             struct egpu_controller_choice *out, struct egpu_error *err)
{
    enum egpu_api_provisioner kind =
        c->core_pct >= 100 ? EGPU_API_PROVISIONER_PHYSICAL : EGPU_API_PROVISIONER_GPUSHARE;
    uint32_t want = kind == EGPU_API_PROVISIONER_PHYSICAL ? (uint32_t)(c->core_pct / 100) : 1;
    struct egpu_reservation r = {0};
    struct egpu_node *n;
    struct egpu_error e = {0};
    const char *p = gpus;
    int rc;

    memset(out, 0, sizeof(*out));
    if (cls != NULL && cls->provisioner != kind)
        return kind_error(cls, kind, err);
    n = egpu_cluster_node(inv->cluster, node);
    if (n == NULL)
        return egpu_error_set(err, EGPU_ERANGE,
                              "node %s is not one class %s may use (no Node object, not matched "
                              "by its nodeSelector, or no healthy card of a model it allows)",
                              node, class_name(cls));
    for (;;) {
        size_t len = strcspn(p, ",");
        const struct egpu_controller_card *card;
        char name[EGPU_K8S_NAME_MAX];

        if (len == 0 || len >= sizeof(name))
            return egpu_error_set(err, EGPU_ERANGE,
                                  EGPU_ANN_SELECTED_GPUS " \"%.64s\" is not a list of GPU "
                                                         "names separated by commas",
                                  gpus);
        memcpy(name, p, len);
        name[len] = '\0';
        if (out->ngpus == want || out->ngpus == EGPU_NODE_GPUS_MAX)
            return egpu_error_set(err, EGPU_ERANGE,
                                  EGPU_ANN_SELECTED_GPUS " names more than the %u card(s) the "
                                                         "claim asks",
                                  want);
        card = egpu_map_get(inv->by_name, name);
        if (card == NULL)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "GPU %s is not a card class %s may use (no such GPU object, "
                                  "unhealthy, or a model the class does not allow)",
                                  name, class_name(cls));
        if (strcmp(card->node, node) != 0)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "GPU %s is on node %s, not on the selected node %s", name,
                                  card->node, node);
        for (uint32_t i = 0; i < out->ngpus; i++) {
            if (strcmp(out->gpu_names[i], name) == 0)
                return egpu_error_set(err, EGPU_ERANGE,
                                      EGPU_ANN_SELECTED_GPUS " names GPU %s twice", name);
        }
        snprintf(out->gpu_names[out->ngpus], EGPU_K8S_NAME_MAX, "%s", name);
        r.uuids[out->ngpus++] = card->uuid;
        snprintf(out->model, sizeof(out->model), "%s", card->model);
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    if (out->ngpus != want)
        return egpu_error_set(err, EGPU_ERANGE,
                              EGPU_ANN_SELECTED_GPUS " names %u card(s); the claim asks %u",
                              out->ngpus, want);
    snprintf(out->node, sizeof(out->node), "%s", node);
    out->source = kind;
    out->mem_mib = c->has_mem ? c->mem_mib : 0;
    out->core_pct = c->core_pct;
    if (c->tflops_milli > 0) {
        int64_t peak = cls != NULL ? egpu_api_class_peak(cls, out->model) : 0;

        if (peak == 0)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "class %s has no tflops.<model> parameter for GPU %s's model %s",
                                  class_name(cls), out->gpu_names[0], out->model);
        if (egpu_api_tflops_to_core(c->tflops_milli, peak, &out->core_pct, &e) != 0)
            return egpu_error_set(err, EGPU_ERANGE, "%s on GPU %s", e.msg, out->gpu_names[0]);
        out->from_tflops = true;
    }
    r.ncards = out->ngpus;
    r.core_milli =
        kind == EGPU_API_PROVISIONER_PHYSICAL ? EGPU_GPU_MILLI : (uint32_t)out->core_pct * 10;
    r.mem_mib = (uint32_t)out->mem_mib;
    rc = egpu_cluster_reserve(inv->cluster, TRIAL_KEY, n, &r, &e);
    if (rc == 0)
        return egpu_cluster_release(inv->cluster, TRIAL_KEY, err);
    if (rc == EGPU_ENOFIT)
        return egpu_error_set(err, EGPU_ENOFIT, "no room on the selected node %s: %s", node, e.msg);
    return egpu_error_set(err, rc, "the selected cards on node %s: %s", node, e.msg);
}
