#!/usr/bin/env bash
# Old build against new for the model client: the dsm example (Jacobi heat
# in rmr-dsm shared memory, local processes over TCP on loopback) built at
# REV (default: the first parent of HEAD) in a worktree of its own and at
# the working tree, then ROUNDS (default 7) interleaved rounds, each: one
# single-threaded process for reference, then two and four single-threaded
# processes old then new (every other round new then old), at 256 and 1024
# rows, ITERS iterations (default 200: long enough that one run's figure
# is not a few scheduling hiccups). Prints every round (also to LOG, default
# bench-out/dsm-ab.txt) and the medians, in microseconds per iteration. A
# run whose results differ from one process's (grid, matrix-vector product)
# stops the script. The old build's worktree stays in /tmp for the next run.
#   scripts/dsm-ab.sh [REV] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
REV=$(git rev-parse --verify "${1:-HEAD~1}^{commit}"); ROUNDS=${2:-7}; ITERS=${ITERS:-200}
OLD=/tmp/rmr-dsm-ab-old
LOG=${LOG:-bench-out/dsm-ab.txt}
mkdir -p "$(dirname "$LOG")"
cargo build --release -q -p rmr-examples --example dsm
NEW_D=$PWD/target/release/examples/dsm
if [ ! -d "$OLD" ]; then git worktree add -f --detach "$OLD" "$REV" >/dev/null; else git -C "$OLD" checkout -q --detach "$REV"; fi
(cd "$OLD" && CARGO_TARGET_DIR=$OLD/target cargo build --release -q -p rmr-examples --example dsm)
OLD_D=$OLD/target/release/examples/dsm
run() { # binary procs rows -> us per iteration (results checked)
  RAYON_NUM_THREADS=1 "$1" --sweep "$2" --rows "$3" --iters "$ITERS" --locks 20 |
    awk -v p="$2" -v b="$1" '$1 == p {
      if ($3 != "true" || $5 != "true") { print b " --sweep " p ": results differ from one process" > "/dev/stderr"; exit 1 }
      print $2 }'
}
for r in $(seq 1 "$ROUNDS"); do
  line="round $r:"
  for rows in 256 1024; do
    one=$(run "$NEW_D" 1 "$rows")
    line="$line rows $rows 1p $one"
    for p in 2 4; do
      if [ $((r % 2)) = 1 ]; then o=$(run "$OLD_D" "$p" "$rows"); n=$(run "$NEW_D" "$p" "$rows")
      else n=$(run "$NEW_D" "$p" "$rows"); o=$(run "$OLD_D" "$p" "$rows"); fi
      line="$line ${p}p old $o new $n"
    done
  done
  echo "$line"
done | tee "$LOG"
python3 - "$LOG" <<'EOF2'
import sys, statistics as st
rows = {}
for l in open(sys.argv[1]):
    t = l.split()
    i = 2
    while i < len(t):
        rows_ = t[i + 1]
        rows.setdefault((rows_, "1p"), []).append(float(t[i + 3]))
        j = i + 4
        while j < len(t) and t[j] != "rows":
            rows.setdefault((rows_, t[j] + " old"), []).append(float(t[j + 2]))
            rows.setdefault((rows_, t[j] + " new"), []).append(float(t[j + 4]))
            j += 5
        i = j
print("medians, us per iteration:")
for (r, k), v in sorted(rows.items(), key=lambda kv: (int(kv[0][0]), kv[0][1])):
    print(f"  {r} rows, {k}: {st.median(v):.1f}")
for r in sorted({k[0] for k in rows}, key=int):
    one = st.median(rows[(r, "1p")])
    for p in ("2p", "4p"):
        o, n = st.median(rows[(r, p + " old")]), st.median(rows[(r, p + " new")])
        print(f"  {r} rows, {p}: new/old {n / o:.2f}; 1 process / {p}: old {one / o:.2f}x, new {one / n:.2f}x")
EOF2
