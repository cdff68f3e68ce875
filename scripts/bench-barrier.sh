#!/usr/bin/env bash
# The barrier sweep behind BENCHMARKS.md: RDMA vs send/recv barrier for 2..16
# local processes, shared memory off (every process on the schedule) and on
# (pretend nodes of 2 processes each: the masters run the schedule).
# Writes JSON lines to OUT (default bench-out/barrier.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-out/barrier.jsonl}; mkdir -p "$(dirname "$OUT")"; : > "$OUT"
BACKEND=${BACKEND:-tcp}; ITERS=${ITERS:-2000}
cargo build --release -q -p rmr-bench
B=target/release/rmr-bench
for n in 2 3 4 5 6 8 10 12 14 16; do
  "$B" barrier --procs "$n" --backend "$BACKEND" --shm off --iters "$ITERS" --json | tee -a "$OUT"
  "$B" barrier --procs "$n" --backend "$BACKEND" --shm on --nodes $(( (n + 1) / 2 )) --iters "$ITERS" --json | tee -a "$OUT"
done
echo "wrote $OUT"
