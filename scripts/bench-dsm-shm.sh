#!/usr/bin/env bash
# The DSM runtime with page data between local processes over shm (the
# default) against over tcp on loopback (`--shm off`): Jacobi at 256 and
# 1024 rows x 500, 50 iterations, 1, 2 and 4 single-threaded processes
# (RAYON_NUM_THREADS=1 dsm --sweep 1,2,4), ROUNDS interleaved rounds
# (default 3; on and off taking turns). Prints each row, then the medians.
#   scripts/bench-dsm-shm.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
cargo build --release -q -p rmr-examples --example dsm
D=target/release/examples/dsm
OUT=$(mktemp); trap 'rm -f "$OUT"' EXIT
for r in $(seq "$ROUNDS"); do
  for rows in 256 1024; do
    for shm in on off; do
      RAYON_NUM_THREADS=1 "$D" --sweep 1,2,4 --rows "$rows" --iters 50 --locks 20 --shm "$shm" |
        awk -v r="$r" -v rows="$rows" -v shm="$shm" '$1 ~ /^[0-9]+$/ && NF >= 5 {print r, rows, shm, $1, $2, $3}'
    done
  done
done | tee "$OUT"
python3 - "$OUT" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print("| rows x 500 | procs | shm on, us/iter | shm off (tcp loopback), us/iter | off / on |")
print("|---|---|---|---|---|")
for n in ("256", "1024"):
    for p in ("2", "4"):
        on = [float(r[4]) for r in rows if r[1] == n and r[2] == "on" and r[3] == p]
        off = [float(r[4]) for r in rows if r[1] == n and r[2] == "off" and r[3] == p]
        print(f"| {n} | {p} | {st.median(on):.0f} ({', '.join(f'{x:.0f}' for x in on)}) | {st.median(off):.0f} ({', '.join(f'{x:.0f}' for x in off)}) | {st.median(off) / st.median(on):.2f} |")
assert all(r[5] == "true" for r in rows), "a run's grid differed from one process's"
PY
