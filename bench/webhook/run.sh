#!/bin/sh
# bench/webhook/run.sh - egpu-webhook under load over TLS: a throwaway CA
# and server certificate (openssl), the test API server (tests/apiserver/server.py) with a few
# GPU objects, egpu-webhook on one CPU and webhook_load on the other, then three runs:
#
#   1. egpu-webhook, open loop: 500 kept-alive clients, 2,000 requests/s, 10 s after a 2 s
#      warm-up, /mutate and /validate alternately (the issue's target: p99 under 1 ms);
#   2. egpu-webhook, closed loop: the most requests/s it answers at 500 connections;
#   3. the floor: floor_server (src/net's HTTPS server, one JSON parse, the least reply) under
#      run 1's load, so the gap to run 1 is the webhook's own work.
#
# It builds nothing: the programs come from $EGPU_BUILD (default build/; `make build`).
# Figures, not a test: the exit status is 1 only when something could not run or a reply was
# wrong (not 200, or response.uid not the request's).
#
# Usage: bench/webhook/run.sh [--quick] [--no-floor] [-- webhook_load flags...]
#   --quick      3 s runs after a 1 s warm-up: a smoke test, not figures to quote
#   --no-floor   skip run 3
#   -- FLAGS     more flags for webhook_load in runs 1 and 3 (e.g. -- --rate 5000
#                --connections 100); see `webhook_load --help`
# Environment:
#   EGPU_BUILD          the build directory (default build)
#   EGPU_WEBHOOK_ARGS   more flags for egpu-webhook (e.g. "--threads 4")
#   SERVER_CPU, CLIENT_CPU  the CPUs the server and the client are pinned to (default 1 and 0;
#                       the test API server shares the client's). Not pinned on one CPU.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${EGPU_BUILD:-build}
case "$build" in /*) ;; *) build=$root/$build ;; esac
quick=0
floor=1
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --no-floor) floor=0 ;;
    --)
        shift
        break
        ;;
    -h | --help)
        sed -n '2,28p' "$0"
        exit 0
        ;;
    *)
        echo "run.sh: unknown option $1 (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

webhook=$build/src/webhook/egpu-webhook
load=$build/bench/webhook/webhook_load
floor_server=$build/bench/webhook/floor_server
for p in "$webhook" "$load" "$floor_server"; do
    if [ ! -x "$p" ]; then
        echo "run.sh: $p not built (make build, or cmake --build $build)" >&2
        exit 2
    fi
done
for t in openssl curl python3 taskset; do
    if ! command -v $t >/dev/null 2>&1; then
        echo "run.sh: $t not found (scripts/deps.sh installs it)" >&2
        exit 2
    fi
done

if [ "$(nproc)" -ge 2 ]; then
    server_pin="taskset -c ${SERVER_CPU:-1}"
    client_pin="taskset -c ${CLIENT_CPU:-0}"
    pinning="egpu-webhook on CPU ${SERVER_CPU:-1}, webhook_load and the test API server on CPU ${CLIENT_CPU:-0}"
else
    server_pin=""
    client_pin=""
    pinning="one CPU: client and server share it"
fi
timing=""
[ $quick -eq 1 ] && timing="--duration 3 --warmup 1"

dir=$(mktemp -d /tmp/egpu-bench-webhook.XXXXXX)
pids=""
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    for p in $pids; do
        kill "$p" 2>/dev/null
    done
    for p in $pids; do
        wait "$p" 2>/dev/null
    done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
    echo "run.sh: $*" >&2
    exit 1
}

# Wait up to $2 seconds for a line matching $3 in file $1; print it.
wait_line() {
    i=0
    while [ $i -lt $(($2 * 20)) ]; do
        line=$(grep -m1 -E "$3" "$1" 2>/dev/null) && {
            echo "$line"
            return 0
        }
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}

# A throwaway CA and a server certificate it signs, for 127.0.0.1 (ECDSA P-256, as
# cert-manager's ECDSA issuers make; the handshakes happen in the warm-up only).
(
    cd "$dir" &&
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
            -subj /CN=egpu-bench-ca -keyout ca.key -out ca.crt &&
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
            -subj /CN=egpu-webhook.elastic-gpu-system.svc -keyout tls.key -out tls.csr &&
        printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' \
            'extendedKeyUsage=serverAuth' >ext.cnf &&
        openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
            -extfile ext.cnf -out tls.crt
) >"$dir/openssl.log" 2>&1 || fail "openssl: $(cat "$dir/openssl.log")"

# The test API server, with GPU objects for the webhook to list: two nodes of 8 A100s
# (40960 MiB) and one of 4 T4s (15360 MiB).
token=bench-token
# shellcheck disable=SC2086
$client_pin /usr/bin/python3 "$root/tests/apiserver/server.py" --port 0 --token $token \
    >"$dir/api.out" 2>"$dir/api.err" &
pids="$pids $!"
api=$(wait_line "$dir/api.out" 15 '^listening on http://') || fail "test API server: $(cat "$dir/api.err")"
api=${api#listening on }
gpu() { # node index model MiB
    curl -fsS -o /dev/null -X POST -H "Authorization: Bearer $token" \
        -H 'Content-Type: application/json' "$api/apis/elasticgpu.io/v1alpha1/gpus" \
        -d "{\"apiVersion\":\"elasticgpu.io/v1alpha1\",\"kind\":\"GPU\",
             \"metadata\":{\"name\":\"$1-gpu$2\"},\"spec\":{\"nodeName\":\"$1\",\"index\":$2,
             \"uuid\":\"GPU-$1-$2\",\"model\":\"$3\",\"memory\":$4}}" || fail "creating GPU $1-gpu$2"
}
for i in 0 1 2 3 4 5 6 7; do
    gpu gpu-node-1 $i A100 40960
    gpu gpu-node-2 $i A100 40960
done
for i in 0 1 2 3; do
    gpu gpu-node-3 $i T4 15360
done
cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: bench, cluster: {server: '$api'}}]
users: [{name: bench, user: {token: $token}}]
contexts: [{name: bench, context: {cluster: bench, user: bench}}]
current-context: bench
EOF

# egpu-webhook as deploy/webhook runs it (2 HTTPS threads, info logs), on its own CPU.
# shellcheck disable=SC2086
$server_pin "$webhook" --kubeconfig "$dir/kubeconfig" --listen 127.0.0.1 --port 0 \
    --health-listen 127.0.0.1 --health-port 0 --tls-cert "$dir/tls.crt" --tls-key "$dir/tls.key" \
    ${EGPU_WEBHOOK_ARGS:-} >"$dir/webhook.out" 2>"$dir/webhook.log" &
webhook_pid=$!
pids="$pids $webhook_pid"
serving=$(wait_line "$dir/webhook.log" 15 'serving addr=.* health_port=') || fail "egpu-webhook did not start: $(cat "$dir/webhook.log")"
port=$(echo "$serving" | sed -n 's/.* port=\([0-9]*\) .*/\1/p')
hport=$(echo "$serving" | sed -n 's/.*health_port=\([0-9]*\).*/\1/p')
i=0
until curl -fs -o /dev/null "http://127.0.0.1:$hport/readyz"; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "egpu-webhook not ready in 10 s: $(tail -5 "$dir/webhook.log")"
    sleep 0.1
done

status=0
run() { # title, server pid, then webhook_load's flags
    title=$1
    spid=$2
    shift 2
    echo
    echo "== $title"
    echo "   ($pinning; load average before: $(cut -d' ' -f1-3 /proc/loadavg))"
    # shellcheck disable=SC2086
    $client_pin "$load" --cacert "$dir/ca.crt" --server-pid "$spid" $timing "$@" || status=1
}

echo "== bench/webhook: $(nproc) CPUs, $(uname -r); egpu-webhook ${EGPU_WEBHOOK_ARGS:-(default flags)}"
run "egpu-webhook, open loop" "$webhook_pid" --url "https://127.0.0.1:$port" "$@"
run "egpu-webhook, closed loop (most requests/s at this many connections)" "$webhook_pid" \
    --url "https://127.0.0.1:$port" --closed
kill "$webhook_pid" 2>/dev/null
wait "$webhook_pid" 2>/dev/null
if grep -qE '^[EF][0-9]{4} ' "$dir/webhook.log"; then
    echo "run.sh: egpu-webhook logged errors:" >&2
    grep -E '^[EF][0-9]{4} ' "$dir/webhook.log" | head -5 >&2
fi

if [ $floor -eq 1 ]; then
    # shellcheck disable=SC2086
    $server_pin "$floor_server" --tls-cert "$dir/tls.crt" --tls-key "$dir/tls.key" --port 0 \
        >"$dir/floor.out" 2>"$dir/floor.err" &
    floor_pid=$!
    pids="$pids $floor_pid"
    furl=$(wait_line "$dir/floor.out" 10 '^listening on https://') || fail "floor_server: $(cat "$dir/floor.err")"
    run "the floor: src/net's HTTPS server, one JSON parse, the least reply (floor_server)" \
        "$floor_pid" --url "${furl#listening on }" "$@"
fi
exit $status
