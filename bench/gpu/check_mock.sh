#!/bin/sh
# bench/gpu/check_mock.sh BINDIR MOCKDIR VCUDA - the bench/gpu programs run end to end against
# the mock driver (tests/mock) with the interposer preloaded, so their plumbing (lookup paths,
# workers, commands, tables) is checked on machines without a GPU. Run by ctest when the mock
# and the interposer are part of the build.
#   BINDIR   where bench_gpu_mem, bench_gpu_compute, bench_gpu_overhead and bench_gpu_tiny are
#   MOCKDIR  the directory holding the mock libcuda.so.1 and libnvidia-ml.so.1
#   VCUDA    libegpu-vcuda.so
# What must hold: bench_gpu_mem passes every check (the mock is exact; the SIGKILL target is
# relaxed to 30 s for a loaded CI machine); bench_gpu_compute and bench_gpu_overhead print a
# figure for every row; the interposed workers' controllers made no driver call per launch
# (their line at exit; each thread caches its context). Their targets are timing figures, not
# asserted here (STYLE: speed targets are for benchmarks, never timed tests).
set -u
bindir=$1
mockdir=$2
vcuda=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/egpu-gpubench-check-XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0
fail() {
    echo "check_mock: $*" >&2
    status=1
}

export LD_LIBRARY_PATH="$mockdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EGPU_GPUBENCH_VCUDA="$vcuda"
# The interposer's per-context charge pinned to the mock's context size, so the rows below are
# exact: 1024 MiB limit - 300 MiB context = 724 MiB free = 11 x 64 MiB + 20 MiB.
export EGPU_VCUDA_CONTEXT_MIB=300
unset EGPU_MOCK_NVML_GPUS EGPU_MOCK_CUDA_CONTEXT_MIB EGPU_MOCK_CUDA_KERNEL_NS

echo "== bench_gpu_mem"
EGPU_MOCK_CUDA_STATE=$work/mem.state "$bindir/bench_gpu_mem" --kill-target-ms 30000 \
    >"$work/mem.out" 2>&1
rc=$?
cat "$work/mem.out"
[ $rc -eq 0 ] || fail "bench_gpu_mem exited $rc"
# 9 paths x 3 lookups, each a PASS row with the limit as total and an OOM at the end.
n=$(grep -cE '^[a-z0-9]+ +(direct|dlsym|proc) +1024 +724 +11 x 64 +OOM .* yes +PASS$' "$work/mem.out")
[ "$n" -eq 27 ] || fail "bench_gpu_mem: $n of 27 limit rows passed with 11 x 64 MiB under 1024 MiB"
grep -q '^suggested EGPU_VCUDA_CONTEXT_MIB=300 ' "$work/mem.out" ||
    fail "bench_gpu_mem: the mock's 300 MiB context was not measured"
grep -qE '^memory: ([0-9]+) of \1 checks passed$' "$work/mem.out" ||
    fail "bench_gpu_mem: not every check passed"

echo "== bench_gpu_compute"
EGPU_MOCK_CUDA_STATE=$work/compute.state EGPU_MOCK_CUDA_BLOCK_NS=10000 \
    "$bindir/bench_gpu_compute" --window-ms 1000 --warmup-s 1 --depth 8 --cases driver,1x50,4x30,pair \
    >"$work/compute.out" 2>&1
rc=$?
cat "$work/compute.out"
[ $rc -le 1 ] || fail "bench_gpu_compute exited $rc"
for row in '^driver alone +- +1 +100\.0 ' '^1 x 50% +50% +1 +50\.0 ' '^4 x 30% +30% +4 +30\.0 ' \
    '^two containers A 10% +1 +10\.0 ' '^two containers B 90% +1 +90\.0 '; do
    grep -qE "$row +[0-9]+\.[0-9]+ +[-+][0-9]+\.[0-9]+ " "$work/compute.out" ||
        fail "bench_gpu_compute: no figures for row /$row/"
done
grep -qE '^compute: [0-9]+ of 4 interposed rows' "$work/compute.out" ||
    fail "bench_gpu_compute: no summary over 4 interposed rows"

echo "== bench_gpu_overhead"
EGPU_MOCK_CUDA_STATE=$work/overhead.state "$bindir/bench_gpu_overhead" --rounds 1 \
    --batches 20 --batch 16 --pace-us 200 --allocs 16 --alloc-reps 2 >"$work/overhead.out" 2>&1
rc=$?
cat "$work/overhead.out"
[ $rc -le 1 ] || fail "bench_gpu_overhead exited $rc"
n=$(grep -cE '^(driver|interposer).* +[0-9]+\.[0-9] ' "$work/overhead.out")
[ "$n" -eq 8 ] || fail "bench_gpu_overhead: $n of 8 rows have figures"
grep -q 'FAIL' "$work/overhead.out" && fail "bench_gpu_overhead: a configuration failed"
# With tokens available a launch makes no driver call of its own: the controller
# asks for the thread's context once, then at its timed launches only.
grep -qE '^controller, core 50%: per launch [0-9.]+ timed, 0\.0[0-9]+ context queries' \
    "$work/overhead.out" || fail "bench_gpu_overhead: no controller line, or a context query per launch"

echo "== bench_gpu_tiny"
# A 4 us launch call, as a real driver's, and 1 us kernels: the driver's loop keeps the card
# about 8% busy, under both limits.
EGPU_MOCK_CUDA_STATE=$work/tiny.state EGPU_MOCK_CUDA_SUBMIT_NS=4000 EGPU_MOCK_CUDA_BLOCK_NS=1000 \
    "$bindir/bench_gpu_tiny" --rounds 1 --launches 20000 --host-us 8 --calls 2000 \
    >"$work/tiny.out" 2>&1
rc=$?
cat "$work/tiny.out"
[ $rc -le 1 ] || fail "bench_gpu_tiny exited $rc"
n=$(grep -cE '^(driver|interposer).* +[0-9]+ +[0-9]+\.[0-9]% +[0-9]+ +[0-9]+\.[0-9]%' "$work/tiny.out")
[ "$n" -eq 3 ] || fail "bench_gpu_tiny: $n of 3 rows have figures"
n=$(grep -cE '^(cu|clock_gettime).* +[0-9]+\.[0-9]$' "$work/tiny.out")
[ "$n" -eq 10 ] || fail "bench_gpu_tiny: $n of 10 driver calls timed"
grep -q 'FAIL' "$work/tiny.out" && fail "bench_gpu_tiny: a configuration failed"
n=$(grep -cE '^controller, core [35]0%: per launch [0-9.]+ timed, 0\.0[0-9]+ context queries' \
    "$work/tiny.out")
[ "$n" -eq 2 ] || fail "bench_gpu_tiny: $n of 2 controller lines without a context query per launch"
exit $status
