#!/usr/bin/env bash
# Zero-copy sends of the tcp backend (`RMR_TCP_ZEROCOPY`) on an unshaped
# veth rail in the lab ([mr-efficiency]): in each of ROUNDS interleaved
# rounds (default 5), taking turns, RDMA-write bandwidth at 64 KiB, 1 MiB
# and 4 MiB over one rail with the client's payloads copied into the
# socket (`off`, the default) and sent with MSG_ZEROCOPY from 64 KiB on;
# each row with the busy CPUs of the whole machine over its run. veth
# (like loopback) delivers to a socket on this host, where the kernel
# copies the pages after all: this measures what the notices cost here,
# not what a NIC would save.
# Writes OUT/rows.jsonl and OUT/summary.md (each round, medians, ratios).
#   scripts/bench-zerocopy.sh [ROUNDS] [OUT]   (default 5, bench-out/zerocopy)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
OUT=${2:-bench-out/zerocopy}
mkdir -p "$OUT"
git describe --always --dirty --abbrev=7 >"$OUT/commit"
P=rmrz
trap 'pkill -f "rmr-bench server --rails 198.18.0.2 --port 7690" 2>/dev/null || true; scripts/lab.sh down $P' EXIT
cargo build --release -q -p rmr-bench
B=$PWD/target/release/rmr-bench
scripts/lab.sh pair $P none,none >/dev/null
ip netns exec $P-b env RMR_TCP_NEAR=rtt "$B" server --rails 198.18.0.2 --port 7690 --idle 60 >>"$OUT/server.log" 2>&1 &
sleep 0.5
run() { # label, RMR_TCP_ZEROCOPY value
  ip netns exec $P-a env RMR_TCP_NEAR=rtt RMR_TCP_ZEROCOPY="$2" "$B" client --json --port 7690 \
    --rails 198.18.0.2 --test bw --sizes 64K,1M,4M --iters "${ITERS:-150}" 2>>"$OUT/client.log" |
    python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if r.get("test") == "bw":
        print(json.dumps({"round": int(sys.argv[1]), "what": sys.argv[2], "size": r["size"],
                          "mbps": r["mbps"], "cpus": r.get("cpus")}))
' "$round" "$1"
}
: >"$OUT/rows.jsonl"
for round in $(seq "$ROUNDS"); do
  {
    if [ $((round % 2)) = 1 ]; then run copied off; run zerocopy 64K
    else run zerocopy 64K; run copied off; fi
  } | tee -a "$OUT/rows.jsonl"
done
python3 - "$OUT/rows.jsonl" "$(cat "$OUT/commit")" "$ROUNDS" >"$OUT/summary.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
commit, rounds = sys.argv[2], int(sys.argv[3])
print(f"`scripts/bench-zerocopy.sh {rounds}` at {commit}: one unshaped veth rail, "
      f"{rounds} interleaved rounds; Gbit/s per round and the median; busy CPUs of the "
      "whole machine and CPU-seconds per Gbit; the ratio zero-copy/copied of the medians.\n")
print("| size | sends | Gbit/s each round | median Gbit/s | median busy CPUs | CPU s per Gbit | zero-copy/copied |")
print("|---|---|---|---|---|---|---|")
for size in sorted({r["size"] for r in rows}):
    med = {}
    for w in ("copied", "zerocopy"):
        rs = sorted((r for r in rows if r["what"] == w and r["size"] == size), key=lambda r: r["round"])
        if not rs:
            continue
        g = [r["mbps"] / 1000 for r in rs]
        c = [r["cpus"] for r in rs if r.get("cpus") is not None]
        mg = statistics.median(g)
        mc = statistics.median(c) if c else float("nan")
        med[w] = mg
        ratio = f"{med['zerocopy'] / med['copied']:.2f}" if w == "zerocopy" and "copied" in med else ""
        name = "MSG_ZEROCOPY from 64 KiB" if w == "zerocopy" else "copied (default)"
        size_s = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"| {size_s} | {name} | {', '.join(f'{x:.1f}' for x in g)} | {mg:.1f} | {mc:.2f} | {mc / mg:.3f} | {ratio} |")
PY
cat "$OUT/summary.md"
