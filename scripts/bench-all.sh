#!/usr/bin/env bash
# Every measurement behind BENCHMARKS.md, in one run (~40 minutes):
#   scripts/bench-all.sh [OUT]          (default bench-out)
#   python3 scripts/benchmarks-md.py [OUT] > BENCHMARKS.md
# Each part builds and tears down its own lab; run it on an otherwise idle
# machine (the figures are ratios measured side by side, but a busy machine
# still disturbs the CPU-bound and latency rows).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-out}; mkdir -p "$OUT"
# The sources measured (commit, and a digest of uncommitted changes). Each
# part rebuilds (it also runs alone), so sources edited during the run would
# be measured by the later parts only: the run records what it started
# from, and says so if that changed by the end.
rev() { echo "$(git describe --always --abbrev=7 --dirty 2>/dev/null || echo unknown) $(git diff HEAD 2>/dev/null | sha1sum | cut -c1-8)"; }
START=$(rev)
echo "${START%% *}" > "$OUT/commit"
scripts/setup.sh
cargo build --release -q -p rmr-bench -p zipper-bridge -p rmr-examples --examples
scripts/bench-floor.sh 3 | tee "$OUT/floor.txt"
scripts/bench-lab.sh "$OUT/lab"
scripts/rt-instructions.sh "$OUT/rt-instructions.jsonl"
ITERS=${ITERS:-2000} scripts/bench-barrier.sh "$OUT/barrier.jsonl"
scripts/bench-ofi.sh "$OUT/ofi-loopback.jsonl" "$OUT/barrier-ofi.jsonl"
scripts/bench-zipper.sh 1gbit 1gbit "$OUT/zipper.jsonl" | tee "$OUT/zipper.log"
sed -n '/^zipper bridge, links/,$p' "$OUT/zipper.log" > "$OUT/zipper.txt"
target/release/examples/dsm --sweep 1,2,4 | tee "$OUT/dsm.txt"
scripts/bench-dsm.sh "$OUT/dsm.jsonl"
scripts/bench-scale.sh "$OUT/scale.jsonl"
cargo build --release -q -p rmr-examples --example async_pingpong
for i in 1 2 3; do target/release/examples/async_pingpong 5 3000; done | tee "$OUT/async.txt"
git describe --always --abbrev=7 > "$OUT/async-commit"
target/release/rmr-bench demo | tee "$OUT/demo.txt"
if [ "$(rev)" != "$START" ]; then
  echo "bench-all: the sources changed during the run (from ${START%% *}): its parts measured different code" >&2
  echo "${START%% *}, sources changed during the run" > "$OUT/commit"
fi
echo "bench-all: done; python3 scripts/benchmarks-md.py $OUT > BENCHMARKS.md"
