/* tests/unit/testutil.h - helpers shared by the unit tests.
 *
 * Include after <cmocka.h>'s prerequisites. Builds small clusters by hand so
 * each test states its cluster in a line, and checks that a test leaves no
 * egpu_malloc block behind.
 */
#ifndef EGPU_TESTUTIL_H
#define EGPU_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "egpu/core.h"

/* Add node name with ngpus cards of model (mem_mib each) to c; asserts success. */
static inline struct egpu_node *tu_add_node(struct egpu_cluster *c, const char *name,
                                            int64_t cpu_milli, int64_t mem_mib, uint32_t ngpus,
                                            const char *model, uint32_t gpu_mem_mib)
{
    struct egpu_gpu_spec gpus[EGPU_NODE_GPUS_MAX];
    struct egpu_node_spec spec = {
        .name = name, .cpu_milli = cpu_milli, .mem_mib = mem_mib, .ngpus = ngpus, .gpus = gpus};
    struct egpu_error err = {0};

    for (uint32_t i = 0; i < ngpus; i++)
        gpus[i] = (struct egpu_gpu_spec){.index = i, .model = model, .mem_mib = gpu_mem_mib};
    if (egpu_cluster_add_node(c, &spec, &err) != 0)
        fail_msg("add node %s: %s", name, err.msg);
    return egpu_cluster_node(c, name);
}

/* A request for one container: core_pct as elasticgpu.io/gpu-core (0 = no GPU). */
static inline struct egpu_pod_request tu_request(int64_t cpu_milli, int64_t mem_mib,
                                                 int64_t core_pct, int64_t gpu_mem_mib)
{
    struct egpu_pod_request r;
    struct egpu_error err = {0};

    memset(&r, 0, sizeof(r));
    r.cpu_milli = cpu_milli;
    r.mem_mib = mem_mib;
    if (core_pct > 0) {
        r.ncontainers = 1;
        if (egpu_container_request_set(&r.containers[0], core_pct, gpu_mem_mib, &err) != 0)
            fail_msg("request: %s", err.msg);
    }
    return r;
}

/* Use a card's allocation directly (test setup): assign pod key on node with
 * one share of core_pct percent on card index gpu. */
static inline void tu_use_card(struct egpu_cluster *c, struct egpu_node *n, const char *pod,
                               uint16_t gpu, int64_t core_pct)
{
    struct egpu_pod_request r = tu_request(0, 0, core_pct, 0);
    struct egpu_pick pick = {.nshares = 1};
    struct egpu_error err = {0};

    pick.shares[0] = (struct egpu_share){
        .container = 0,
        .gpu = gpu,
        .core_milli = r.containers[0].core_milli,
        .mem_mib = r.containers[0].core_milli == EGPU_GPU_MILLI ? n->gpus[gpu].mem_mib : 0};
    if (egpu_cluster_assign(c, pod, n, &r, &pick, &err) != 0)
        fail_msg("use card %u of %s: %s", gpu, n->name, err.msg);
}

/* What a tenant plants at a name the code under test opens: victim is made
 * a file holding "precious", then at path (removed first) kind 0 puts a
 * symbolic link to victim, 1 a hard link to it, 2 a FIFO. Asserts success. */
static inline void tu_plant(const char *path, const char *victim, int kind)
{
    int fd;

    (void)unlink(path);
    (void)unlink(victim);
    fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "precious", 8), 8);
    close(fd);
    if (kind == 0)
        assert_int_equal(symlink(victim, path), 0);
    else if (kind == 1)
        assert_int_equal(link(victim, path), 0);
    else
        assert_int_equal(mkfifo(path, 0666), 0);
}

/* victim (planted by tu_plant) still holds "precious", and nothing more. */
static inline void tu_victim_intact(const char *victim)
{
    char buf[16] = {0};
    int fd = open(victim, O_RDONLY);

    assert_true(fd >= 0);
    assert_int_equal(read(fd, buf, sizeof(buf)), 8);
    close(fd);
    assert_memory_equal(buf, "precious", 8);
}

/* Skip the calling test, printing reason (what is missing), or fail it with
 * reason under CI=true, where every test must run (scripts/deps.sh installs
 * what they need). cmocka's skip() leaves the program's exit status 0,
 * which ctest shows as passed: without this, a skip in CI goes unseen. */
static inline void tu_skip(const char *reason)
{
    const char *ci = getenv("CI");

    if (ci != NULL && strcmp(ci, "true") == 0)
        fail_msg("skipped under CI=true, which runs every test: %s", reason);
    print_message("skipped: %s\n", reason);
    skip();
}

#endif /* EGPU_TESTUTIL_H */
