/* tests/fuzz/fuzz_vcuda_config.c - the interposer's vcuda.conf parser
 * (src/vcuda/config.c: egpu__vcuda_config_parse), which reads a file in the
 * container's allocation directory.
 *
 * Invariants: a parse that succeeds gives limits in their documented ranges
 * (a compute limit present, core 1..100, core limit core..100, at
 * most EGPU_VCUDA_MAX_CARDS cards); an error has a message; failing closed
 * after an error leaves a memory limit of 0 MiB and no compute limit.
 */
#include "fuzz.h"
#include "vcuda_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct egpu__vcuda_config cfg;
    struct egpu_error err = {0};
    char *text = fuzz_dup(data, size);

    egpu__vcuda_config_defaults(&cfg, "/fuzz");
    if (egpu__vcuda_config_parse(&cfg, text, size, "vcuda.conf", &err) == 0) {
        FUZZ_CHECK(cfg.has_core);
        FUZZ_CHECK(cfg.core_pct >= 1 && cfg.core_pct <= 100);
        FUZZ_CHECK(cfg.core_limit_pct >= cfg.core_pct && cfg.core_limit_pct <= 100);
        FUZZ_CHECK(cfg.ngpus <= EGPU_VCUDA_MAX_CARDS);
    } else {
        FUZZ_CHECK(err.msg[0] != '\0');
        egpu__vcuda_config_fail_closed(&cfg);
        FUZZ_CHECK(cfg.fail_closed && cfg.has_memory && cfg.memory_mib == 0 && !cfg.has_core);
    }
    free(text);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}
