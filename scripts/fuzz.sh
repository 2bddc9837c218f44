#!/bin/sh
# scripts/fuzz.sh - build and run the libFuzzer targets of tests/fuzz
# (docs/fuzzing.md). `make fuzz` and `make fuzz-smoke` (part of `make check`)
# call it.
#
#   sh scripts/fuzz.sh build         configure and build them into $FUZZ_BUILD
#   sh scripts/fuzz.sh smoke         each target for $FUZZ_RUNS executions
#                                    (default 10000, fixed seed) from the
#                                    committed seeds; fails on any crash, leak,
#                                    hang or broken invariant
#   sh scripts/fuzz.sh run [SECONDS] each target for SECONDS (default
#                                    $FUZZ_SECONDS, else 60), growing the corpus
#                                    kept in $FUZZ_BUILD/corpus/<target>
#
# Each run prints, per target, the executions done and libFuzzer's coverage
# (cov: edges reached, ft: features) and the corpus size; the full log is in
# $FUZZ_BUILD/logs/<target>.log, and an input that crashed is saved under
# $FUZZ_BUILD/artifacts/<target>/. FUZZ_TARGETS="quantity watch" picks targets.
# Without clang and its libFuzzer runtime (Debian clang-14, libclang-rt-14-dev:
# `make deps`) smoke says so and passes, except under CI=true, where it fails;
# build and run always fail.
set -eu
cd "$(dirname "$0")/.."

FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_RUNS=${FUZZ_RUNS:-10000}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
CC_FUZZ=${CC_FUZZ:-}
ALL_TARGETS="quantity assigned pod_request status vcuda_config kubeconfig watch list_decode extender admission claims budget gpustatus selection kubectl vcuda_inspect workload dra dra_claim"
TARGETS=${FUZZ_TARGETS:-$ALL_TARGETS}

# Longest input libFuzzer makes, per target (its default is 4096 bytes).
max_len() {
    case "$1" in
    extender | watch | list_decode | kubeconfig | admission | dra_claim) echo 16384 ;;
    *) echo 4096 ;;
    esac
}

find_clang() {
    [ -n "$CC_FUZZ" ] && { echo "$CC_FUZZ"; return 0; }
    for c in clang clang-14; do
        if command -v "$c" >/dev/null 2>&1; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

# Can cc link a libFuzzer target with ASan and UBSan?
can_fuzz() {
    dir=$(mktemp -d)
    printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
        >"$dir/t.c"
    ok=0
    "$1" -fsanitize=fuzzer,address,undefined "$dir/t.c" -o "$dir/t" >/dev/null 2>&1 || ok=1
    rm -rf "$dir"
    return $ok
}

build() {
    if ! cc=$(find_clang) || ! can_fuzz "$cc"; then
        echo "fuzz: clang with libFuzzer (Debian packages clang-14, libclang-rt-14-dev) not found; run \`make deps\`" >&2
        return 77
    fi
    cmake -S . -B "$FUZZ_BUILD" -DCMAKE_C_COMPILER="$cc" -DEGPU_FUZZ=ON -DEGPU_TESTS_ONLY=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$FUZZ_BUILD" --target egpu_fuzzers -j "$JOBS"
}

# build with its output in $FUZZ_BUILD/logs/build.log, shown when it fails.
quiet_build() {
    mkdir -p "$FUZZ_BUILD/logs"
    st=0
    build >"$FUZZ_BUILD/logs/build.log" 2>&1 || st=$?
    [ $st -eq 0 ] && return 0
    cat "$FUZZ_BUILD/logs/build.log" >&2
    return $st
}

# run TARGET CORPUS_DIR ARGS...: run one target, print its figures; 1 on a crash.
run_one() {
    t=$1
    corpus=$2
    shift 2
    bin="$FUZZ_BUILD/tests/fuzz/fuzz_$t"
    log="$FUZZ_BUILD/logs/$t.log"
    dict=""
    [ -f "tests/fuzz/dict/$t.dict" ] && dict="-dict=tests/fuzz/dict/$t.dict"
    # Seeds read in place from shared/ beside the checkout, never copied in.
    shared=""
    [ "$t" = dra ] && [ -d ../shared/k8s-wire/dra/grpc ] && shared=../shared/k8s-wire/dra/grpc
    [ "$t" = dra_claim ] && [ -d ../shared/k8s-wire/dra ] && shared=../shared/k8s-wire/dra
    mkdir -p "$FUZZ_BUILD/logs" "$FUZZ_BUILD/artifacts/$t" "$corpus"
    rc=0
    # shellcheck disable=SC2086
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
        UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        "$bin" -timeout=10 -max_len="$(max_len "$t")" -print_final_stats=1 \
        -artifact_prefix="$FUZZ_BUILD/artifacts/$t/" $dict "$@" \
        "$corpus" "tests/fuzz/corpus/$t" $shared >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
    cov=$(grep -E '^#[0-9]+[[:space:]]+(DONE|INITED)' "$log" | tail -n 1 |
        sed -n 's/.*cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\)\/.*/cov \1 ft \2 corpus \3/p')
    if [ $rc -ne 0 ]; then
        printf '%-13s FAILED (exit %d) after %s executions; log %s\n' "$t" "$rc" "${execs:-?}" "$log"
        grep -E 'ERROR:|invariant broken|SUMMARY|Test unit written' "$log" | head -n 8 | sed 's/^/    /'
        return 1
    fi
    printf '%-13s %10s executions in %4ss  %s\n' "$t" "${execs:-?}" "${secs:-?}" "$cov"
    return 0
}

cmd=${1:-smoke}
case "$cmd" in
build)
    build
    ;;
smoke)
    st=0
    quiet_build || st=$?
    if [ $st -eq 77 ] && [ "${CI:-}" != "true" ]; then
        echo "fuzz: skipped: clang with libFuzzer not found (make deps installs clang-14 and libclang-rt-14-dev)"
        exit 0
    fi
    [ $st -eq 0 ] || exit 1
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    failed=0
    for t in $TARGETS; do
        run_one "$t" "$scratch/$t" -runs="$FUZZ_RUNS" -seed=1 || failed=1
    done
    exit $failed
    ;;
run)
    secs=${2:-${FUZZ_SECONDS:-60}}
    quiet_build || exit 1
    failed=0
    for t in $TARGETS; do
        run_one "$t" "$FUZZ_BUILD/corpus/$t" -max_total_time="$secs" || failed=1
    done
    exit $failed
    ;;
*)
    echo "usage: sh scripts/fuzz.sh build | smoke | run [SECONDS]" >&2
    exit 2
    ;;
esac
