#!/bin/sh
# bench/replay_speed.sh - speed and memory of the whole 10-seed FGD replay of
# the openb default trace (the targets: under 60 s and under 200 MiB peak on
# a 2-core machine). Prints the figures and how they compare with the targets;
# exits 1 when a target is missed. Usage: bench/replay_speed.sh [egpu-sim]
set -eu
sim=${1:-build/egpu-sim}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== bench: FGD replay, openb default trace, seeds 42..51, $(nproc) cores"
start=$(date +%s.%N)
"$sim" --policy fgd --seeds 42..51 --no-plot --out "$out" >"$out/log"
end=$(date +%s.%N)
cat "$out/log"

secs=$(echo "$start $end" | awk '{printf "%.2f", $2 - $1}')
mib=$(sed -n 's/.*peak memory \([0-9.]*\) MiB.*/\1/p' "$out/log")
pods=$(awk -F, 'NR > 1 { n += $5 } END { print n }' "$out/replay_runs.csv")
rate=$(echo "$pods $secs" | awk '{printf "%.0f", $1 / $2}')

echo
echo "replay: $pods pods placed or failed in $secs s wall = $rate pods/s (whole process)"
echo "peak memory: $mib MiB"
status=0
awk -v s="$secs" 'BEGIN { exit !(s < 60) }' && echo "target wall < 60 s: ok" ||
    { echo "target wall < 60 s: MISSED"; status=1; }
awk -v m="$mib" 'BEGIN { exit !(m < 200) }' && echo "target peak memory < 200 MiB: ok" ||
    { echo "target peak memory < 200 MiB: MISSED"; status=1; }
exit $status
