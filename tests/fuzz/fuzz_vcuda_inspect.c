/* tests/fuzz/fuzz_vcuda_inspect.c - egpu-vcuda-inspect's decoding and
 * rendering of a container's shared regions (src/vcuda/region.c:
 * egpu__vcuda_region_decode; src/vcuda/inspect.c), which read files any
 * process of the container can write.
 *
 * Input: byte 0 picks the memory region's shape: even, the rest of the
 * input laid over a valid region (a real one made at start-up) after its
 * header, so slots, cards and the slot count are the fuzzer's while the
 * check word passes; odd, the raw bytes. The same bytes are laid over a
 * valid compute region after its magic, version and size (and tried raw).
 * Liveness and the clock come from the input too.
 *
 * Invariants: a decode that fails says why; one that succeeds has at most
 * EGPU_VCUDA_REGION_SLOTS slots, each inside slots_hwm, none free; both
 * renderings of any decoded pair finish (ASan/UBSan watch the indexing).
 */
#define _GNU_SOURCE /* mkdtemp */
#include <stdlib.h>
#include <unistd.h>

#include "fuzz.h"
#include "inspect.h"
#include "throttle.h"

#define MEM_HEADER_BYTES 32 /* magic, version, size, generation, check */

static unsigned char *mem_template;
static size_t mem_bytes;
static FILE *sink;

static void check_view(const struct egpu__vcuda_region_view *v)
{
    FUZZ_CHECK(v->slots_hwm <= EGPU_VCUDA_REGION_SLOTS);
    FUZZ_CHECK(v->nslots <= v->slots_hwm);
    for (unsigned i = 0; i < v->nslots; i++) {
        FUZZ_CHECK(v->slots[i].index < v->slots_hwm);
        FUZZ_CHECK(v->slots[i].pid != 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct egpu__vcuda_region_view mem;
    static struct egpu__vcuda_report r;
    struct egpu__vcuda_core_view core;
    struct egpu__vcuda_config cfg;
    struct egpu_error err = {0};
    struct egpu__vcuda_throttle_region k;
    unsigned char *buf;
    size_t len, n;
    bool mem_ok, core_ok;

    if (size < 1)
        return 0;
    if (data[0] % 2 == 0) {
        buf = malloc(mem_bytes);
        FUZZ_CHECK(buf != NULL);
        memcpy(buf, mem_template, mem_bytes);
        n = size - 1 < mem_bytes - MEM_HEADER_BYTES ? size - 1 : mem_bytes - MEM_HEADER_BYTES;
        memcpy(buf + MEM_HEADER_BYTES, data + 1, n);
        len = mem_bytes;
    } else {
        buf = (unsigned char *)fuzz_dup(data + 1, size - 1);
        len = size - 1;
    }
    mem_ok = egpu__vcuda_region_decode(buf, len, &mem, &err) == 0;
    FUZZ_CHECK(mem_ok || err.msg[0] != '\0');
    if (mem_ok)
        check_view(&mem);
    free(buf);

    memset(&k, 0, sizeof(k));
    n = size - 1 < sizeof(k) - 24 ? size - 1 : sizeof(k) - 24;
    memcpy((char *)&k + 24, data + 1, n);
    k.magic = THR_MAGIC;
    k.version = THR_VERSION;
    k.bytes = sizeof(k);
    core_ok = egpu__vcuda_core_decode(&k, sizeof(k), &core, &err) == 0;
    FUZZ_CHECK(core_ok);
    err.msg[0] = '\0';
    if (egpu__vcuda_core_decode(data + 1, size - 1, &core, &err) != 0)
        FUZZ_CHECK(err.msg[0] != '\0');
    else
        core_ok = true;

    egpu__vcuda_config_defaults(&cfg, "/fuzz");
    cfg.source = data[0] & 2 ? EGPU_VCUDA_SRC_FILE : EGPU_VCUDA_SRC_NONE;
    cfg.has_memory = cfg.has_core = true;
    cfg.memory_mib = 4096;
    cfg.core_pct = 30;
    cfg.core_limit_pct = 60;
    cfg.ngpus = data[0] & 4 ? 2 : 0;
    memset(&r, 0, sizeof(r));
    r.dir = "/fuzz\"dir\x01";
    r.region_dir = "/fuzz/shared";
    r.conf_path = "/fuzz/vcuda.conf";
    r.cfg = &cfg;
    r.mem_path = "/fuzz/shared/vcuda-memory.shm";
    r.mem = mem_ok ? &mem : NULL;
    r.core_path = "/fuzz/shared/vcuda-core.shm";
    r.core = core_ok ? &core : NULL;
    for (size_t i = 0; i < EGPU_VCUDA_REGION_SLOTS; i++) {
        r.alive[i] = 1 + i < size && data[1 + i] & 1 ? EGPU_VCUDA_ALIVE : EGPU_VCUDA_DEAD;
        r.host_pid[i] = (int32_t)(i * 7);
    }
    r.now_ns = size > 9 ? (uint64_t)data[9] << 40 : 0;
    egpu__vcuda_report_text(sink, &r);
    egpu__vcuda_report_json(sink, &r);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char dir[] = "/tmp/egpu-fuzz-inspect-XXXXXX", path[64];
    struct egpu__vcuda_region *h = NULL;
    struct egpu_error err = {0};
    FILE *f;

    (void)argc;
    (void)argv;
    fuzz_quiet();
    sink = fopen("/dev/null", "w");
    FUZZ_CHECK(sink != NULL && mkdtemp(dir) != NULL);
    FUZZ_CHECK(egpu__vcuda_region_open(&h, dir, &err) == 0);
    egpu__vcuda_region_close(h);
    snprintf(path, sizeof(path), "%s/%s", dir, EGPU_VCUDA_REGION_NAME);
    mem_bytes = egpu__vcuda_region_file_bytes();
    mem_template = malloc(mem_bytes);
    f = fopen(path, "rb");
    FUZZ_CHECK(f != NULL && mem_template != NULL);
    FUZZ_CHECK(fread(mem_template, 1, mem_bytes, f) == mem_bytes);
    fclose(f);
    unlink(path);
    rmdir(dir);
    return 0;
}
