#!/usr/bin/env bash
# The model client's speed-up table: Jacobi heat (and the matrix-vector
# kernel) in rmr-dsm shared memory at 256, 1024 and 8192 rows x 500
# columns, 50 iterations: one single-threaded process, 2 and 4 processes
# (RAYON_NUM_THREADS=1 dsm --sweep 1,2,4), and one process with rayon on
# every CPU (dsm --sweep 1), ROUNDS interleaved rounds (default 5), local
# processes over TCP on loopback. Writes JSON lines to OUT (default
# bench-out/dsm.jsonl) and the commit measured to OUT's directory/dsm-commit.
# Then LAB_ROUNDS (default 3, 0 to skip) rounds of the two-host row: two
# processes in two network namespaces joined by two tbf-shaped 1 Gbit/s
# rails, each on a 2-rail multirail EP (scripts/dsm-lab.sh: two nodes of
# one CPU each), 1024 rows, against one single-threaded process on one CPU
# in the same round.
#   scripts/bench-dsm.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-out/dsm.jsonl}
mkdir -p "$(dirname "$OUT")"; : > "$OUT"
cargo build --release -q -p rmr-examples --example dsm
git describe --always --abbrev=7 --dirty > "$(dirname "$OUT")/dsm-commit" 2>/dev/null || true
D=target/release/examples/dsm
rows_of() { # threads label, then the sweep's table on stdin -> JSON lines
  awk -v t="$1" -v r="$2" -v k="$3" '$1 ~ /^[0-9]+$/ && NF >= 5 {
    printf "{\"test\": \"dsm\", \"rows\": %d, \"procs\": %d, \"threads\": \"%s\", \"round\": %d, \"us_per_iter\": %s, \"identical\": %s, \"matvec_us\": %s, \"matvec_identical\": %s}\n", r, $1, t, k, $2, $3, $4, $5 }'
}
for round in $(seq "${ROUNDS:-5}"); do
  for rows in 256 1024 8192; do
    RAYON_NUM_THREADS=1 "$D" --sweep 1,2,4 --rows "$rows" --iters 50 --locks 20 | rows_of 1 "$rows" "$round"
    "$D" --sweep 1 --rows "$rows" --iters 50 --locks 20 | rows_of all "$rows" "$round"
  done
done | tee -a "$OUT"
for round in $(seq "${LAB_ROUNDS:-3}"); do
  lab=$(RAYON_NUM_THREADS=1 scripts/dsm-lab.sh 1gbit,1gbit --rows 1024 --iters 50 --locks 20 \
    | grep -o 'us_per_iter=[0-9.]*' | cut -d= -f2)
  one=$(RAYON_NUM_THREADS=1 taskset -c 0 "$D" --sweep 1 --rows 1024 --iters 50 --locks 20 | awk '$1 == 1 { print $2 }')
  echo "{\"test\": \"dsm-lab\", \"rows\": 1024, \"round\": $round, \"us_per_iter\": ${lab:-null}, \"one_thread_us\": ${one:-null}}"
done | tee -a "$OUT"
echo "wrote $OUT"
