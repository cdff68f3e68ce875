#!/usr/bin/env bash
# Rails of 4:1 speed (400 and 100 Mbit/s): one rail, even, adaptive and
# weighted striping, with the raw-TCP sum of both rails. JSON lines to OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-out/lab}; mkdir -p "$OUT"
P=rmru
trap 'pkill -f "rmr-bench server --rails 198.18" 2>/dev/null || true; scripts/lab.sh down $P' EXIT
cargo build --release -q -p rmr-bench
B=$PWD/target/release/rmr-bench
scripts/lab.sh pair $P 400mbit,100mbit
ip netns exec $P-b "$B" server --rails 198.18.0.2,198.18.1.2 --idle 30 2>>"$OUT/server.log" &
sleep 0.5
c() { ip netns exec $P-a "$B" client --json "$@" 2>>"$OUT/client.log"; }
{
  c --rails 198.18.0.2 --test bw --sizes 1M,4M --baseline
  c --rails 198.18.1.2 --test bw --sizes 1M,4M --baseline
  for pol in even adaptive weighted:4,1; do
    c --rails 198.18.0.2,198.18.1.2 --test bw --sizes 1M,4M --policy $pol --iters 20
  done
} | tee "$OUT/uneven.jsonl"
