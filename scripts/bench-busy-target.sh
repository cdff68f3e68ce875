#!/usr/bin/env bash
# RDMA reads aimed at a process that computes between its waits
# (examples/busy_target.rs: the target waits for a message, then computes
# 20 ms without calling into rmr; the initiator reads 8 KiB 1 ms into that
# compute, then waits for the next message, as at a barrier for a slower
# peer: 2 ms, and 0 for a target whose next message is already there;
# and `polls`: twenty 1 ms waits that find nothing, then a wait of about
# 8 ms, then 10 ms of compute, as a rank that polls for a while first),
# old build against new: this tree's example built against the
# library at REV (default: the first parent of HEAD) in a worktree of its
# own, and at the working tree. ROUNDS (default 5)
# interleaved rounds, each running, per backend (tcp over loopback, shm,
# multirail over two loopback rails) and idle time, old then new (every other round new
# then old), the target pinned to CPU 1 and the initiator to CPU 0 (the
# target's progress helper shares the computing thread's CPU, as on a node
# whose cores all compute). 40 reads per run. Prints every round (also to
# LOG, default bench-out/busy-target.txt), then per backend the median of
# the runs' median read latencies, in microseconds, and new/old.
#   scripts/bench-busy-target.sh [REV] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
REV=$(git rev-parse --verify "${1:-HEAD~1}^{commit}"); ROUNDS=${2:-5}
OLD=/tmp/rmr-busy-target-old
LOG=${LOG:-bench-out/busy-target.txt}
mkdir -p "$(dirname "$LOG")"
cargo build --release -q -p rmr-examples --example busy_target
NEW_B=$PWD/target/release/examples/busy_target
if [ ! -d "$OLD" ]; then git worktree add -f --detach "$OLD" "$REV" >/dev/null; else git -C "$OLD" checkout -q -f --detach "$REV"; fi
# Both builds run this tree's example (the same measuring program).
cp examples/busy_target.rs "$OLD/examples/"
if ! grep -q '^name = "busy_target"' "$OLD/examples/Cargo.toml"; then
  printf '\n[[example]]\nname = "busy_target"\npath = "busy_target.rs"\n' >> "$OLD/examples/Cargo.toml"
fi
(cd "$OLD" && CARGO_TARGET_DIR=$OLD/target cargo build --release -q -p rmr-examples --example busy_target)
OLD_B=$OLD/target/release/examples/busy_target
port=7485
run() { # binary spec pattern -> median read latency (us)
  port=$((port + 1))
  local env
  case $3 in
    idle*) env=("RMR_BUSY_IDLE_US=${3#idle}") ;;
    # Waits of 1 ms that find nothing, then a long wait, then the compute.
    polls) env=(RMR_BUSY_POLLS=20 RMR_BUSY_IDLE_US=28000 RMR_BUSY_COMPUTE_US=10000 RMR_BUSY_ROUNDS=30) ;;
  esac
  env "${env[@]}" taskset -c 1 "$1" server "$2" "$port" >/dev/null &
  local t=$!
  local host
  case $2 in
    shm:*) host=${2#shm:} ;;
    multirail:*) host=127.0.0.1,127.0.0.2 ;;
    *) host=${2#tcp:} ;;
  esac
  env "${env[@]}" taskset -c 0 "$1" client "$2" "$host:$port" | awk '{print $11}'
  wait "$t"
}
specs=("tcp:127.0.0.1" "shm:busybench" "multirail:tcp:127.0.0.1,tcp:127.0.0.2")
for r in $(seq 1 "$ROUNDS"); do
  line="round $r:"
  for s in "${specs[@]}"; do
    for pat in idle2000 idle0 polls; do
      if [ $((r % 2)) = 1 ]; then o=$(run "$OLD_B" "$s" $pat); n=$(run "$NEW_B" "$s" $pat)
      else n=$(run "$NEW_B" "$s" $pat); o=$(run "$OLD_B" "$s" $pat); fi
      line="$line ${s%%:*}/$pat old $o new $n"
    done
  done
  echo "$line"
done | tee "$LOG"
python3 - "$LOG" <<'PY'
import sys, statistics as st
runs = {}
for l in open(sys.argv[1]):
    t = l.split()[2:]
    for i in range(0, len(t), 5):
        runs.setdefault(t[i], {"old": [], "new": []})
        runs[t[i]]["old"].append(float(t[i + 2]))
        runs[t[i]]["new"].append(float(t[i + 4]))
print("medians of the runs' median read latency, us:")
for b, v in runs.items():
    o, n = st.median(v["old"]), st.median(v["new"])
    print(f"  {b}: old {o:.1f}, new {n:.1f}, new/old {n / o:.3f}")
PY
