/* bench/openb_pods.h - the openb trace's pod mix for the benches at scale
 * (bench_extender --nodes, bench_restart): read the pod list, draw pods
 * from it, and place them on a cluster of 8-card nodes as a running
 * cluster holds them. Static functions, one copy per bench program.
 *
 * Trace: /work/shared/data/openb's README (Alibaba cluster-trace-gpu-v2023,
 * `make data`): name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,...;
 * gpu_milli is per card, below 1000 only when num_gpu is 1. gpu_spec is
 * left out: the bench clusters have one GPU model.
 */
#ifndef EGPU_BENCH_OPENB_PODS_H
#define EGPU_BENCH_OPENB_PODS_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "egpu/api.h"

/* One pod of the trace: what it asks. */
struct tpod {
    int cpu_milli, mem_mib, ngpu, gpu_milli; /* gpu_milli: per card, 1000 for a whole card */
};

/* The pods of the trace file at path into *out (the caller frees it).
 * Returns how many were read; 0 (said on stderr) when the file cannot be. */
static size_t read_trace(const char *path, struct tpod **out)
{
    FILE *f = fopen(path, "r");
    char line[512];
    size_t n = 0, cap = 0;

    *out = NULL;
    if (f == NULL) {
        fprintf(stderr, "bench: %s: %s (make data, EGPU_TRACE_DIR or --trace FILE)\n", path,
                strerror(errno));
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        struct tpod t;

        if (sscanf(line, "%*[^,],%d,%d,%d,%d", &t.cpu_milli, &t.mem_mib, &t.ngpu, &t.gpu_milli) !=
                4 ||
            t.ngpu < 0 || t.ngpu > 8 || t.gpu_milli < 0 || t.gpu_milli > 1000)
            continue; /* the header */
        if (t.ngpu > 1)
            t.gpu_milli = 1000;
        if (n == cap) {
            struct tpod *m = realloc(*out, (cap = cap ? 2 * cap : 1024) * sizeof(**out));

            if (m == NULL)
                break;
            *out = m;
        }
        (*out)[n++] = t;
    }
    fclose(f);
    return n;
}

/* The default trace's pod list into buf (len bytes): in $EGPU_TRACE_DIR, else data/openb
 * (make data), else ../shared/data/openb, as egpu-sim looks. */
static const char *trace_default(char *buf, size_t len)
{
    const char *dir = getenv("EGPU_TRACE_DIR");
    FILE *f;

    if (dir == NULL) {
        dir = "data/openb";
        if ((f = fopen("data/openb/openb_pod_list_default.csv", "r")) != NULL)
            fclose(f);
        else
            dir = "../shared/data/openb";
    }
    snprintf(buf, len, "%s/openb_pod_list_default.csv", dir);
    return buf;
}

/* A 64-bit LCG's next 31 bits. */
static uint64_t rng_next(uint64_t *x)
{
    *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
    return *x >> 33;
}

/* The bench's own view of one node while it fills the cluster. */
struct fill_node {
    int cpu, mem;  /* free milli-CPU and MiB */
    short card[8]; /* free milli of each card */
};

/* A node of 96 cores, 384 GiB and 8 free cards (the trace's G2 nodes). */
static struct fill_node fill_node_new(void)
{
    struct fill_node fn = {.cpu = 96000, .mem = 384 * 1024};

    for (int g = 0; g < 8; g++)
        fn.card[g] = 1000;
    return fn;
}

/* Place t on fn when it fits (its cards first fit, into gpus[0..t->ngpu)). */
static bool fill_fits(struct fill_node *fn, const struct tpod *t, int *gpus)
{
    int got = 0;

    if (fn->cpu < t->cpu_milli || fn->mem < t->mem_mib)
        return false;
    for (int g = 0; g < 8 && got < t->ngpu; g++) {
        if (t->gpu_milli == 1000 ? fn->card[g] == 1000 : fn->card[g] >= t->gpu_milli)
            gpus[got++] = g;
    }
    if (got < t->ngpu)
        return false;
    fn->cpu -= t->cpu_milli;
    fn->mem -= t->mem_mib;
    for (int i = 0; i < got; i++)
        fn->card[gpus[i]] = (short)(fn->card[gpus[i]] - t->gpu_milli);
    return true;
}

/* Draw the next pod of the running population: a pod of the trace, uniformly; CPU-only pods
 * are kept at half their count (the trace's are many short ones). NULL: draw again. */
static const struct tpod *draw_pod(const struct tpod *trace, size_t n, uint64_t *x)
{
    const struct tpod *t = &trace[rng_next(x) % n];

    return t->ngpu == 0 && rng_next(x) % 2 == 0 ? NULL : t;
}

/* Place a drawn pod on one of up to 16 random nodes of fns (nodes of them) where it fits:
 * the node's index, or -1. */
static int place_pod(struct fill_node *fns, int nodes, const struct tpod *t, int *gpus, uint64_t *x)
{
    for (int tries = 0; tries < 16; tries++) {
        int k = (int)(rng_next(x) % (uint64_t)nodes);

        if (fill_fits(&fns[k], t, gpus))
            return k;
    }
    return -1;
}

/* t's elasticgpu.io/assigned text on node (named name, index k) with cards gpus into ann
 * (len bytes): the bench clusters' cards are GPU-<k>-<g>. */
static void assigned_text(char *ann, size_t len, const char *name, int k, const struct tpod *t,
                          const int *gpus)
{
    int at = snprintf(ann, len,
                      "{\"node\":\"%s\",\"containers\":[{\"name\":\"c\",\"core\":%d,\"memory\":%d,"
                      "\"gpus\":[",
                      name, t->gpu_milli / 10, t->gpu_milli == 1000 ? 40960 : 0);

    for (int g = 0; g < t->ngpu && at > 0 && (size_t)at < len; g++)
        at += snprintf(ann + at, len - (size_t)at, "%s\"GPU-%05d-%d\"", g ? "," : "", k, gpus[g]);
    if (at > 0 && (size_t)at < len)
        snprintf(ann + at, len - (size_t)at, "]}]}");
}

/* What t asks of one container, as a v1 Pod container's resources.requests
 * (new reference): cpu in milli-CPU and memory in MiB (at least 1 each),
 * and elasticgpu.io/gpu-core in percent for a GPU pod (100 a whole card). */
static json_t *tpod_requests(const struct tpod *t)
{
    json_t *req = json_object();
    char v[32];

    snprintf(v, sizeof(v), "%dm", t->cpu_milli > 0 ? t->cpu_milli : 1);
    json_object_set_new(req, "cpu", json_string(v));
    snprintf(v, sizeof(v), "%dMi", t->mem_mib > 0 ? t->mem_mib : 1);
    json_object_set_new(req, "memory", json_string(v));
    if (t->ngpu > 0) {
        snprintf(v, sizeof(v), "%d",
                 t->ngpu > 1 || t->gpu_milli == 1000 ? 100 * t->ngpu : t->gpu_milli / 10);
        json_object_set_new(req, EGPU_RES_GPU_CORE, json_string(v));
    }
    return req;
}

#endif /* EGPU_BENCH_OPENB_PODS_H */
