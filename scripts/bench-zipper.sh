#!/usr/bin/env bash
# Zipper bridge benchmark sweep on the lab's zipper layout (cluster A host,
# two zipper nodes with IP forwarding off, cluster B host), as ratios in one
# run: link A and link B alone (rmr-bench over plain TCP), one bridge, two
# bridges, and the store-and-forward baseline beside each.
#
#   scripts/bench-zipper.sh [RATE_A] [RATE_B] [OUT]     (defaults 1gbit 1gbit bench-out/zipper.jsonl)
#
# Builds the lab, runs the sweep, tears the lab down (also on failure) and
# writes one JSON object per line to OUT, then prints the ratio table.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE_A=${1:-1gbit}
RATE_B=${2:-1gbit}
OUT=${3:-bench-out/zipper.jsonl}
P=zb
mkdir -p "$(dirname "$OUT")"
: > "$OUT"

nice -n 10 cargo build --release -q -p rmr-bench -p zipper-bridge
BENCH=$PWD/target/release/rmr-bench
BRIDGE=$PWD/target/release/rmr-bridge
WORLD=$(mktemp /tmp/zipper-world.XXXXXX.toml)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  scripts/lab.sh down "$P" >/dev/null 2>&1 || true
  rm -f "$WORLD"
}
trap cleanup EXIT

scripts/lab.sh zipper "$P" 2 "$RATE_A" "$RATE_B"
cat > "$WORLD" <<TOML
[[cluster]]
name = "A"
[[cluster]]
name = "B"
[[bridge]]
a = "198.18.10.2"
b = "198.18.20.1"
port = 7700
[[bridge]]
a = "198.18.11.2"
b = "198.18.21.1"
port = 7700
[[process]]
rank = 0
cluster = "A"
addrs = ["198.18.10.1", "198.18.11.1"]
port = 7470
[[process]]
rank = 1
cluster = "B"
addrs = ["198.18.20.2", "198.18.21.2"]
port = 7470
TOML

ns() { ip netns exec "$P-$1" "${@:2}"; }
# tag LABEL: add "case":LABEL to every JSON row on stdin and append to OUT.
tag() { python3 -c 'import json,sys
for l in sys.stdin:
    l=l.strip()
    if l.startswith("{"):
        r=json.loads(l); r["case"]=sys.argv[1]; print(json.dumps(r))' "$1" | tee -a "$OUT"; }
# Background processes are `ip netns exec` itself (it execs the program, so
# the PID is the program's): they can be stopped by PID.
start_bg() { ip netns exec "$P-$1" "${@:2}" & PIDS+=($!); }
stop_bg() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# Link A and link B alone: plain rmr over TCP (and raw TCP) on the same links.
start_bg z0 "$BENCH" server --rails 198.18.10.2 --port 7480 --idle 600; SA=$!
start_bg cb "$BENCH" server --rails 198.18.20.2 --port 7480 --idle 600; SB=$!
sleep 0.5
ns ca "$BENCH" client --rails 198.18.10.2 --port 7480 --test lat --sizes 8 --json --warmup 500 --baseline | tag linkA
ns ca "$BENCH" client --rails 198.18.10.2 --port 7480 --test bw --sizes 1M --json --baseline | tag linkA
ns z0 "$BENCH" client --rails 198.18.20.2 --port 7480 --test lat --sizes 8 --json --warmup 500 --baseline | tag linkB
ns z0 "$BENCH" client --rails 198.18.20.2 --port 7480 --test bw --sizes 1M --json --baseline | tag linkB
stop_bg "$SA"; stop_bg "$SB"; sleep 0.3

for mode in cut-through store-and-forward; do
  extra=(); [ "$mode" = store-and-forward ] && extra=(--store-and-forward --ring 64)
  start_bg z0 "$BRIDGE" --world "$WORLD" --bridge 0 "${extra[@]}"; B0=$!
  start_bg z1 "$BRIDGE" --world "$WORLD" --bridge 1 "${extra[@]}"; B1=$!
  start_bg cb "$BENCH" server --world "$WORLD" --rank 1 --idle 600; S=$!
  sleep 0.7
  C=(ns ca "$BENCH" client --world "$WORLD" --rank 0 --peer 1 --json --threshold 64K)
  "${C[@]}" --bridges 1 --test lat --sizes 8 --warmup 500 | tag "$mode/1"
  "${C[@]}" --bridges 1 --test bw --sizes 64K,1M,4M | tag "$mode/1"
  "${C[@]}" --bridges 1 --test bibw --sizes 64K,1M,4M | tag "$mode/1"
  "${C[@]}" --bridges 2 --test bw --sizes 1M,4M | tag "$mode/2"
  stop_bg "$S"
  kill -TERM "$B0" "$B1" 2>/dev/null || true; wait "$B0" "$B1" 2>/dev/null || true
  sleep 0.3
done

python3 - "$OUT" "$RATE_A" "$RATE_B" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def get(case, test, size, key):
    for r in rows:
        if r.get("case") == case and r.get("test") == test and r.get("size") == size and r.get(key) is not None:
            return r[key]
    return None
M = 1 << 20
print(f"\nzipper bridge, links A={sys.argv[2]} B={sys.argv[3]} (one run)")
la, lb = get("linkA", "lat", 8, "lat_us"), get("linkB", "lat", 8, "lat_us")
ba, bb = get("linkA", "bw", M, "mbps"), get("linkB", "bw", M, "mbps")
print(f"link A: 8 B lat {la:.1f} us, 1 MiB bw {ba:.0f} Mbit/s;  link B: {lb:.1f} us, {bb:.0f} Mbit/s")
print(f"{'metric':44} {'cut-through':>12} {'store-fwd':>12}  target")
def line(name, f, target):
    v = [f(m) for m in ("cut-through", "store-and-forward")]
    s = ["-" if x is None else f"{x:.2f}" for x in v]
    print(f"{name:44} {s[0]:>12} {s[1]:>12}  {target}")
slower = min(ba, bb)
for sz, lab in ((64 << 10, "64K"), (M, "1M"), (4 * M, "4M")):
    line(f"1 bridge bw {lab} / slower link (1 MiB)", lambda m, sz=sz: (get(m + "/1", "bw", sz, "mbps") or 0) / slower, ">= 0.90")
for sz, lab in ((64 << 10, "64K"), (M, "1M"), (4 * M, "4M")):
    line(f"1 bridge bibw {lab} / bw {lab}", lambda m, sz=sz: (get(m + "/1", "bibw", sz, "mbps") or 0) / (get(m + "/1", "bw", sz, "mbps") or 1), ">= 1.8 (thesis ~1.0)")
for sz, lab in ((M, "1M"), (4 * M, "4M")):
    line(f"2 bridges bw {lab} / 1 bridge bw {lab}", lambda m, sz=sz: (get(m + "/2", "bw", sz, "mbps") or 0) / (get(m + "/1", "bw", sz, "mbps") or 1), ">= 1.8")
line("8 B lat / (lat A + lat B)", lambda m: (get(m + "/1", "lat", 8, "lat_us") or 0) / (la + lb), "<= 1.3")
line("8 B lat (us)", lambda m: get(m + "/1", "lat", 8, "lat_us"), "< store-and-forward")
PY
