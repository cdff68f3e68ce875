#!/usr/bin/env bash
# The scale table: `rmr-bench scale` (two processes on loopback) for
# N = 16, 256, 1024 and 4096 connected tcp EP pairs, and 16, 256 and 1024
# two-rail multirail EP pairs (engine pinned): threads, RSS per idle EP,
# connections per second (16 connector threads, 4 in flight each) and the 8 B write+notify half round
# trip on one EP among N-1 idle ones against one alone on its own IA,
# ROUNDS interleaved rounds (default 5) of ITERS round trips (default 2000).
# Writes JSON lines to OUT (default bench-out/scale.jsonl) and the commit
# measured to OUT's directory/scale-commit.
#   scripts/bench-scale.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-out/scale.jsonl}
mkdir -p "$(dirname "$OUT")"; : > "$OUT"
cargo build --release -q -p rmr-bench
git describe --always --abbrev=7 --dirty > "$(dirname "$OUT")/scale-commit" 2>/dev/null || true
B=target/release/rmr-bench
port=7700
run() { # rails eps
  "$B" scale --json --rails "$1" --eps "$2" --rounds "${ROUNDS:-5}" --iters "${ITERS:-2000}" --port "$port" | tee -a "$OUT"
  port=$((port + 2))
}
for n in 16 256 1024 4096; do run 1 "$n"; done
for n in 16 256 1024; do run 2 "$n"; done
echo "wrote $OUT"
