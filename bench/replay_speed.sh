#!/bin/sh
# bench/replay_speed.sh - speed and memory of the whole 10-seed FGD replay of
# the openb default trace, and of the same replay in DRA mode (egpu-sim --dra:
# the allocator's first fit picks the cards, the extender FGD the node, blind
# to the allocator's choice, so both card choices run). The targets, each: under
# 60 s and under 200 MiB peak on a 2-core machine. Prints arrivals per second
# and peak memory per variant and how they compare with the targets; exits 1
# when a target is missed. Usage: bench/replay_speed.sh [egpu-sim]
set -eu
sim=${1:-build/egpu-sim}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0

# bench NAME ARGS...: one egpu-sim run of seeds 42..51 with ARGS, its figures.
bench() {
    name=$1
    shift
    dir="$out/$name"
    mkdir "$dir"
    echo "== bench: $name replay, openb default trace, seeds 42..51, $(nproc) cores"
    start=$(date +%s.%N)
    "$sim" --policy fgd --seeds 42..51 --no-plot --out "$dir" "$@" >"$dir/log"
    end=$(date +%s.%N)
    cat "$dir/log"

    secs=$(echo "$start $end" | awk '{printf "%.2f", $2 - $1}')
    mib=$(sed -n 's/.*peak memory \([0-9.]*\) MiB.*/\1/p' "$dir/log")
    pods=$(awk -F, 'NR > 1 { n += $5 } END { print n }' "$dir/replay_runs.csv")
    rate=$(echo "$pods $secs" | awk '{printf "%.0f", $1 / $2}')

    echo
    echo "$name replay: $pods arrivals (placed or failed) in $secs s wall = $rate arrivals/s" \
        "(whole process)"
    echo "$name peak memory (RSS): $mib MiB"
    awk -v s="$secs" 'BEGIN { exit !(s < 60) }' && echo "$name target wall < 60 s: ok" ||
        { echo "$name target wall < 60 s: MISSED"; status=1; }
    awk -v m="$mib" 'BEGIN { exit !(m < 200) }' && echo "$name target peak memory < 200 MiB: ok" ||
        { echo "$name target peak memory < 200 MiB: MISSED"; status=1; }
    echo
}

bench FGD
bench DRA --dra --dra-order index --dra-extender blind
exit $status
