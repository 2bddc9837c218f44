#!/bin/sh
# bench/gpu/run.sh - the interposer measured on a real NVIDIA GPU:
# runs bench_gpu_mem (memory limit, context footprint, pool reservations), bench_gpu_compute
# (compute share), bench_gpu_overhead (cost per call; per throttled launch, the cycles and cache
# misses added and the compute controller's driver calls) and bench_gpu_tiny (short kernels under
# a limit, the driver calls' costs) and prints their tables. Without a GPU each prints one
# line "no NVIDIA GPU: <reason>; skipping" and the script exits 0.
#
# Usage: bench/gpu/run.sh [--quick] [BUILD_DIR]
#   BUILD_DIR   where the programs were built (default build): BUILD_DIR/bench/gpu/ when built
#               from the top-level CMakeLists.txt, or BUILD_DIR/ itself for
#               `cmake -S bench/gpu -B BUILD_DIR`
#   --quick     shorter runs (2 s compute windows, one overhead round): a smoke test, not
#               figures to quote
# Environment:
#   EGPU_GPUBENCH_VCUDA  the interposer to preload (default BUILD_DIR/src/vcuda/libegpu-vcuda.so,
#                        else /usr/local/lib/elastic-gpu/libegpu-vcuda.so)
#   EGPU_GPUBENCH_ARGS   extra flags given to every program (e.g. "--device 1")
# Exit status: 0 when every program exited 0 (all targets met, or no GPU), else 1.
set -u
quick=0
build=build
for arg in "$@"; do
    case "$arg" in
    --quick) quick=1 ;;
    -h | --help)
        sed -n '2,19p' "$0"
        exit 0
        ;;
    -*)
        echo "run.sh: unknown option $arg" >&2
        exit 2
        ;;
    *) build=$arg ;;
    esac
done

bindir=$build/bench/gpu
[ -x "$bindir/bench_gpu_mem" ] || bindir=$build
for p in mem compute overhead tiny; do
    if [ ! -x "$bindir/bench_gpu_$p" ]; then
        echo "run.sh: $build/bench/gpu/bench_gpu_$p not built (cmake --build $build)" >&2
        exit 2
    fi
done
if [ -z "${EGPU_GPUBENCH_VCUDA:-}" ] && [ -f "$build/src/vcuda/libegpu-vcuda.so" ]; then
    EGPU_GPUBENCH_VCUDA=$(cd "$build/src/vcuda" && pwd)/libegpu-vcuda.so
    export EGPU_GPUBENCH_VCUDA
fi

mem_args=""
compute_args=""
overhead_args=""
tiny_args=""
if [ $quick -eq 1 ]; then
    mem_args="--lookups direct,proc"
    compute_args="--window-s 2 --warmup-s 1"
    overhead_args="--rounds 1 --batches 50 --alloc-reps 2"
    tiny_args="--rounds 1 --launches 10000 --calls 2000"
fi

status=0
run() {
    echo "== $*"
    # shellcheck disable=SC2086
    "$@" ${EGPU_GPUBENCH_ARGS:-} || status=1
    echo
}
# shellcheck disable=SC2086
run "$bindir/bench_gpu_mem" $mem_args
# shellcheck disable=SC2086
run "$bindir/bench_gpu_compute" $compute_args
# shellcheck disable=SC2086
run "$bindir/bench_gpu_overhead" $overhead_args
# shellcheck disable=SC2086
run "$bindir/bench_gpu_tiny" $tiny_args
exit $status
