#!/usr/bin/env bash
# Checks the latency floor every rmr latency ratio is measured against:
# `rmr-bench raw-tcp client --test lat` (both ends busy-polling a
# non-blocking socket) beside a plain C busy-poll ping-pong
# (benches/c/busypoll_pingpong.c, built here with cc), on one shaped lab
# rail, ROUNDS interleaved rounds (default 3) of SIZES (default 8 and 4K),
# clients on CPU 0 and servers on CPU 1. Prints each round and the median
# ratio rmr-bench raw / C per size: within 1.15 means the Rust floor is no
# straw man. Cleans up its namespaces and servers on exit.
#   scripts/bench-floor.sh [ROUNDS] [RATE]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}; RATE=${2:-1gbit}; P=rmrfl; ITERS=${ITERS:-5000}
SIZES=${SIZES:-8 4096}
command -v cc >/dev/null || { apt-get update -qq && apt-get install -y -qq gcc >/dev/null; }
OUT=$(mktemp -d /tmp/rmr-floor.XXXXXX)
trap 'pkill -f "$OUT/busypoll_pingpong" 2>/dev/null || true; pkill -f "rmr-bench raw-tcp server --rails 198.18.0.2 --port 7690" 2>/dev/null || true; scripts/lab.sh down $P >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
cc -O2 -Wall -o "$OUT/busypoll_pingpong" benches/c/busypoll_pingpong.c
cargo build --release -q -p rmr-bench
B=$PWD/target/release/rmr-bench
scripts/lab.sh pair $P "$RATE" >/dev/null
taskset -c 1 ip netns exec $P-b "$OUT/busypoll_pingpong" server 7691 &
taskset -c 1 ip netns exec $P-b "$B" raw-tcp server --rails 198.18.0.2 --port 7690 --idle 300 >/dev/null 2>&1 &
sleep 0.5
c_lat() { taskset -c 0 ip netns exec $P-a "$OUT/busypoll_pingpong" client 198.18.0.2 7691 "$1" "$ITERS"; }
r_lat() {
  taskset -c 0 ip netns exec $P-a "$B" raw-tcp client --rails 198.18.0.2 --port 7690 --test lat \
    --sizes "$1" --iters "$ITERS" --json | python3 -c 'import json,sys; print(json.loads(sys.stdin.readlines()[-1])["lat_us"])'
}
res=()
for r in $(seq 1 "$ROUNDS"); do
  for s in $SIZES; do
    if [ $((r % 2)) = 1 ]; then c=$(c_lat "$s"); x=$(r_lat "$s"); else x=$(r_lat "$s"); c=$(c_lat "$s"); fi
    echo "round $r size $s: C $c us, rmr-bench raw-tcp $x us"
    res+=("$s $c $x")
  done
done
printf '%s\n' "${res[@]}" | python3 -c '
import sys, statistics as st
rows = [l.split() for l in sys.stdin if l.strip()]
for s in sorted({int(r[0]) for r in rows}):
    rs = [float(r[2]) / float(r[1]) for r in rows if int(r[0]) == s]
    c = st.median(float(r[1]) for r in rows if int(r[0]) == s)
    x = st.median(float(r[2]) for r in rows if int(r[0]) == s)
    v = "within 1.15" if st.median(rs) <= 1.15 else "NOT within 1.15"
    print(f"size {s}: median C {c:.2f} us, rmr-bench raw-tcp {x:.2f} us, ratio {st.median(rs):.3f} ({v}; rounds {[round(q, 3) for q in rs]})")'
