#!/usr/bin/env bash
# Old build against new, interleaved, on one shaped lab rail: the check an
# API or layout change makes that "performance holds". Builds rmr-bench at
# REV (default: the first parent of HEAD) in a worktree of its own, then
# runs ROUNDS (default 6) rounds, each: the 8 B write+notify half round
# trip (3000 round trips) and RDMA-write bandwidth at each of BW_SIZES
# (default 1M), old then new (every other round new then old). With
# WIRE=1, also the bytes each build puts on the rail per 8 B round trip
# (both directions, from the veth's counters: frame headers and TCP/IP's
# own, not time). Prints each round and the medians of new/old. Cleans up
# its namespaces and servers on exit.
#   [BW_SIZES="64 256 1K"] [WIRE=1] scripts/bench-ab.sh [REV] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-HEAD~1}; ROUNDS=${2:-6}; P=rmrab
OLD=/tmp/rmr-ab-old
trap 'pkill -f "rmr-bench server --rails 198.18.0.2 --port 76" 2>/dev/null || true; scripts/lab.sh down $P >/dev/null 2>&1 || true' EXIT
cargo build --release -q -p rmr-bench
NEW_B=$PWD/target/release/rmr-bench
if [ ! -d "$OLD" ]; then git worktree add -f --detach "$OLD" "$REV" >/dev/null; else git -C "$OLD" checkout -q --detach "$REV"; fi
(cd "$OLD" && CARGO_TARGET_DIR=$OLD/target cargo build --release -q -p rmr-bench)
OLD_B=$OLD/target/release/rmr-bench
scripts/lab.sh pair $P 1gbit,1gbit >/dev/null
# The servers on CPU 1, the clients on CPU 0 (as bench-lab's latency rounds).
taskset -c 1 ip netns exec $P-b "$OLD_B" server --rails 198.18.0.2 --port 7600 --idle 60 >/dev/null 2>&1 &
taskset -c 1 ip netns exec $P-b "$NEW_B" server --rails 198.18.0.2 --port 7640 --idle 60 >/dev/null 2>&1 &
sleep 1
BW_SIZES=${BW_SIZES:-1M}
DEV=${P}a0
rail_bytes() { # bytes through the client's end of the rail, both ways
  local t x
  t=$(ip netns exec $P-a cat /sys/class/net/$DEV/statistics/tx_bytes)
  x=$(ip netns exec $P-a cat /sys/class/net/$DEV/statistics/rx_bytes)
  echo $((t + x))
}
LAT_ITERS=3000
run() { # binary port -> "lat_us mbps..."
  local lat bw out b0
  b0=$(rail_bytes)
  lat=$(taskset -c 0 ip netns exec $P-a "$1" client --json --rails 198.18.0.2 --port "$2" --test lat --sizes 8 --iters $LAT_ITERS 2>/dev/null | python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin][-1]["lat_us"])')
  out="$lat"
  if [ "${WIRE:-0}" = 1 ]; then
    # The whole client run (connection, warm-up, control) over its round trips.
    out="$out $(( ($(rail_bytes) - b0) / LAT_ITERS ))"
  fi
  for s in $BW_SIZES; do
    bw=$(ip netns exec $P-a "$1" client --json --rails 198.18.0.2 --port "$2" --test bw --sizes "$s" 2>/dev/null | python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin][-1]["mbps"])')
    out="$out $bw"
  done
  echo "$out"
}
names="lat_us"
[ "${WIRE:-0}" = 1 ] && names="$names bytes_per_rt"
for s in $BW_SIZES; do names="$names mbps_$s"; done
rows=()
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then o=$(run "$OLD_B" 7600); n=$(run "$NEW_B" 7640)
  else n=$(run "$NEW_B" 7640); o=$(run "$OLD_B" 7600); fi
  echo "round $r: old $names = $o; new = $n"
  rows+=("$o|$n")
done
printf '%s\n' "${rows[@]}" | NAMES="$names" python3 -c '
import os, sys, statistics as st
names = os.environ["NAMES"].split()
r = [[list(map(float, h.split())) for h in l.strip().split("|")] for l in sys.stdin if l.strip()]
for i, n in enumerate(names):
    q = [b[i] / a[i] for a, b in r]
    print(f"{n} new/old: median {st.median(q):.3f} (rounds {[round(x, 3) for x in q]}); old {st.median(a[i] for a, _ in r):.2f}, new {st.median(b[i] for _, b in r):.2f}")'
