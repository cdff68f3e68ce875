#!/usr/bin/env bash
# Old build against new, interleaved, on one shaped lab rail: the check an
# API or layout change makes that "performance holds". Builds rmr-bench at
# REV (default: the first parent of HEAD) in a worktree of its own, then
# runs ROUNDS (default 6) rounds, each: the 8 B write+notify half round
# trip (3000 round trips) and 1 MiB RDMA-write bandwidth, old then new
# (every other round new then old). Prints each round and the medians of
# new/old. Cleans up its namespaces and servers on exit.
#   scripts/bench-ab.sh [REV] [ROUNDS]
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
run() { # binary port -> "lat_us mbps"
  local lat bw
  lat=$(taskset -c 0 ip netns exec $P-a "$1" client --json --rails 198.18.0.2 --port "$2" --test lat --sizes 8 --iters 3000 2>/dev/null | python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin][-1]["lat_us"])')
  bw=$(ip netns exec $P-a "$1" client --json --rails 198.18.0.2 --port "$2" --test bw --sizes 1M 2>/dev/null | python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin][-1]["mbps"])')
  echo "$lat $bw"
}
rows=()
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then o=$(run "$OLD_B" 7600); n=$(run "$NEW_B" 7640)
  else n=$(run "$NEW_B" 7640); o=$(run "$OLD_B" 7600); fi
  echo "round $r: old lat_us mbps = $o; new = $n"
  rows+=("$o $n")
done
printf '%s\n' "${rows[@]}" | python3 -c '
import sys, statistics as st
r=[list(map(float,l.split())) for l in sys.stdin if l.strip()]
lat=[n/o for o,_,n,_ in [(a,b,c,d) for a,b,c,d in r]]
bw=[n/o for _,o,_,n in [(a,b,c,d) for a,b,c,d in r]]
print(f"8 B half round trip new/old: median {st.median(lat):.3f} (rounds {[round(x,3) for x in lat]})")
print(f"1 MiB bandwidth new/old:     median {st.median(bw):.3f} (rounds {[round(x,3) for x in bw]})")
print(f"medians: old {st.median(x[0] for x in r):.2f} us {st.median(x[1] for x in r):.0f} Mbit/s; new {st.median(x[2] for x in r):.2f} us {st.median(x[3] for x in r):.0f} Mbit/s")'
