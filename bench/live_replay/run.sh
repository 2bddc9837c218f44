#!/bin/sh
# bench/live_replay/run.sh - the live scheduling path against the replay:
# egpu-scheduler driven over HTTP as kube-scheduler drives it (create the pod in the test API
# server, filter, prioritize, kube-scheduler's choice: score x weight 1 x 10 with ties broken
# at random by a seeded reservoir sample, bind, a simulated kubelet admission) through the
# default trace's arrival sequence, beside egpu-sim on the very same sequence.
#
# Prints the GPU allocation ratio at 80/90/100/130% arrived of both and their difference,
# the failed pods of both, the pods/s of the live path, and cross-checks (the arrivals and
# the final arrived percent egpu-sim replayed, the allocation egpu-scheduler's metrics show,
# how many nodes tied for kube-scheduler's best total, bind retries, error lines in the log).
# The driver is bench/live_replay/live_replay.py (its docstring says every step).
#
# It builds nothing: egpu-scheduler and egpu-sim come from $EGPU_BUILD (default build/).
# Figures, not a test: the exit status is 1 only when something could not run.
#
# Usage: bench/live_replay/run.sh [--every N] [--pods FILE] [more driver flags]
#   --every N    keep every N-th node and pod of the trace (default 4: 304 nodes, 1,548
#                GPUs, 2,711 arrivals, about 10 s on a 2-core machine; 1 = the whole trace,
#                10,792 arrivals, about 90 s). egpu-sim replays the same subsample.
#   --gpu-pods-only  leave the pods asking no GPU out of both replays
#   --cpu-pods WHO  who places the pods asking no GPU: extender (default: egpu-scheduler
#                --pods-without-gpu place) or kube-scheduler alone: kube-scheduler (a seeded
#                random node), least-allocated (its default scores), most-allocated,
#                gpu-most-allocated (MostAllocated on elasticgpu.io/gpu-core)
#   --mark-lag LO-HI, --burst K  arrival mode: a virtual clock, bursts of K same-size
#                replicas, each GPU pod marked allocated LO..HI ms after its bind (README.md)
#   --dra        DRA mode: GPU pods with the marker elasticgpu.io/dra and a ResourceClaim,
#                egpu-scheduler --dra, kube-scheduler's allocator modelled (first fit in
#                index order), against egpu-sim --dra
#   --learn-workload  the extender builds FGD's target workload from the pods it has seen
#                (default: --target-workload with egpu-sim's target_workload.json)
#   --pods FILE  the pod list in the trace directory (default openb_pod_list_default.csv)
#   --policy P   both tiers' policy, of egpu-scheduler and egpu-sim (default fgd; fgd-cpu...)
#   --trace-dir DIR, --seed N, --inflate F, --progress, --keep, --scheduler-args ...: see
#   `python3 bench/live_replay/live_replay.py --help`
# Environment:
#   EGPU_BUILD      the build directory (default build)
#   EGPU_TRACE_DIR  the trace (default ../shared/data/openb)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${EGPU_BUILD:-build}
case "$build" in /*) ;; *) build=$root/$build ;; esac
case "${1:-}" in
-h | --help)
    sed -n '2,39p' "$0"
    exit 0
    ;;
esac
for b in src/scheduler/egpu-scheduler egpu-sim; do
    if [ ! -x "$build/$b" ]; then
        echo "run.sh: $build/$b not built (make build, or cmake --build $build)" >&2
        exit 2
    fi
done
exec /usr/bin/python3 "$root/bench/live_replay/live_replay.py" \
    --scheduler "$build/src/scheduler/egpu-scheduler" --sim "$build/egpu-sim" "$@"
