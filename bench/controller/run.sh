#!/bin/sh
# bench/controller/run.sh - egpu-controller's reconcile throughput and latency:
# the test API server (tests/apiserver/server.py) with 1,000 Nodes of 8 GPU objects
# each and one ElasticGPUClass (gpushare, Immediate), egpu-controller, then 10,000
# ElasticGPUClaims created as fast as 4 kept-alive connections can. A watch on the claims
# times each one from its POST to status.phase Bound.
#
# Prints claims/s created and bound, p50/p90/p99/max time to Bound, the CPU of
# egpu-controller, of the test API server and of the driver, the controller's reconcile
# metrics, and the errors (failed POSTs, claims never Bound, E/F lines in the controller's log).
# The driver is bench/controller/controller_bench.py; the test API server runs with
# TCP_NODELAY (see there; --api-nagle leaves it as server.py makes it).
#
# It builds nothing: egpu-controller comes from $EGPU_BUILD (default build/; `make build`).
# Figures, not a test: the exit status is 1 only when something could not run or a claim was
# never Bound.
#
# Usage: bench/controller/run.sh [--quick] [--claims N] [--nodes N] [more driver flags]
#   --quick      200 claims on 20 nodes: a smoke test, not figures to quote
#   --claims N   claims to create (default 10000)
#   --nodes N    nodes, 8 GPU objects each (default 1000; --cards N changes the 8)
#   see `python3 bench/controller/controller_bench.py --help` for the rest (--clients,
#   --timeout, --api-nagle, --api-cpu, --controller-cpu, --controller-args, --keep)
# Environment:
#   EGPU_BUILD   the build directory (default build)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${EGPU_BUILD:-build}
case "$build" in /*) ;; *) build=$root/$build ;; esac
case "${1:-}" in
-h | --help)
    sed -n '2,25p' "$0"
    exit 0
    ;;
esac
controller=$build/src/controller/egpu-controller
if [ ! -x "$controller" ]; then
    echo "run.sh: $controller not built (make build, or cmake --build $build)" >&2
    exit 2
fi
exec /usr/bin/python3 "$root/bench/controller/controller_bench.py" --controller "$controller" "$@"
