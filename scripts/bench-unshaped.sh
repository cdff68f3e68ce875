#!/usr/bin/env bash
# Multirail where the CPUs are the limit ([mr-efficiency]): two unshaped veth
# rails in the lab, so client, server and kernel share this machine's cores.
# In each of ROUNDS interleaved rounds (default 5), taking turns: 1 MiB and
# 4 MiB RDMA-write bandwidth over one rail (one tcp endpoint), over two rails
# with each engine (pinned, inline, fork-join; policy even), one rail and
# two pinned with the sender's send buffer left to the kernel's autotuning
# (`RMR_TCP_NEAR=off`), and iperf3 over the same rails with one stream
# and with two (one per rail), with its own writes and 1 MiB ones. Every row
# carries the busy CPUs of the whole machine over its run (client, server and
# kernel), so CPU per Gbit/s compares transports that share the same cores.
# The two namespaces share this machine's CPUs and caches as processes of
# one host do, so rmr runs with RMR_TCP_NEAR=rtt on both sides (its near
# send buffer for peers within 200 us at connect, not only for peers on this host).
# Writes OUT/rows.jsonl (every row) and OUT/summary.md (each round, the
# medians, the ratios the issue's goals name, with verdicts).
#   scripts/bench-unshaped.sh [ROUNDS] [OUT]   (default 5, bench-out/unshaped)
#   SUMMARY_ONLY=1 scripts/bench-unshaped.sh ROUNDS [OUT]: the summary again
#   from OUT/rows.jsonl, measuring nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
OUT=${2:-bench-out/unshaped}
mkdir -p "$OUT"
if [ -z "${SUMMARY_ONLY:-}" ]; then
# The commit measured (with -dirty when the tree differs from it).
git describe --always --dirty --abbrev=7 >"$OUT/commit"
P=rmru
trap 'pkill -f "rmr-bench server --rails 198.18.0.2,198.18.1.2 --port 7680" 2>/dev/null || true; pkill -f "iperf3 -s -B 198.18" 2>/dev/null || true; scripts/lab.sh down $P' EXIT
command -v iperf3 >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3 >/dev/null; }
cargo build --release -q -p rmr-bench
B=$PWD/target/release/rmr-bench
scripts/lab.sh pair $P none,none >/dev/null
ip netns exec $P-b env RMR_TCP_NEAR=rtt "$B" server --rails 198.18.0.2,198.18.1.2 --port 7680 --idle 60 >>"$OUT/server.log" 2>&1 &
sleep 0.5
SIZES=1M,4M
IPORT=5301
ITERS=${ITERS:-150}

# Jiffies busy and total over all CPUs, from /proc/stat.
stat() { awk '/^cpu / { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6 }' /proc/stat; }
rmr() { # label, rmr-bench client arguments... (CLIENT_ENV: the client's environment)
  local label=$1; shift
  ip netns exec $P-a env RMR_TCP_NEAR=rtt ${CLIENT_ENV:-} "$B" client --json --port 7680 --test bw --sizes $SIZES --iters "$ITERS" "$@" \
    2>>"$OUT/client.log" |
    python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if r.get("test") != "bw":
        continue
    print(json.dumps({"round": int(sys.argv[1]), "what": sys.argv[2], "size": r["size"],
                      "mbps": r["mbps"], "cpus": r.get("cpus"), "sndbuf": r.get("sndbuf")}))
' "$round" "$label"
}
# iperf3, one stream per rail address given, all at once, 5 s; the busy
# CPUs over the whole run from /proc/stat. With LEN, writes and reads of
# that many bytes (`-l`; iperf3 takes at most 1 MiB): buffers nearer the
# size of rmr's messages, which leave the caches as rmr's do; without,
# iperf3's own 128 KiB (its best here). Either row stands for every size.
iperf() { # label, rails, [LEN in bytes]
  local label=$1 rails=$2 len=${3:-} port=$IPORT pids=() f=() i=0
  # Ports of their own: a one-off server of the last run may linger.
  IPORT=$((IPORT < 5390 ? IPORT + 2 : 5301))
  for r in ${rails//,/ }; do
    ip netns exec $P-b iperf3 -s -B "$r" -p $((port + i)) -1 >/dev/null 2>&1 &
    i=$((i + 1))
  done
  sleep 0.5; i=0
  local s0; s0=$(stat)
  for r in ${rails//,/ }; do
    f+=("$OUT/iperf-$i.json")
    ip netns exec $P-a iperf3 -c "$r" -p $((port + i)) -t 5 ${len:+-l $len} -J >"$OUT/iperf-$i.json" 2>/dev/null &
    pids+=($!); i=$((i + 1))
  done
  wait "${pids[@]}" || true
  local s1; s1=$(stat)
  python3 - "$round" "$label" "$s0" "$s1" "$(nproc --all)" "${f[@]}" <<'PY'
import json, sys
rnd, label, s0, s1, ncpu = sys.argv[1:6]
b0, t0 = map(int, s0.split()); b1, t1 = map(int, s1.split())
cpus = (b1 - b0) / max(1, t1 - t0) * int(ncpu)
runs = [json.load(open(p)) for p in sys.argv[6:]]
bad = [r.get("error") for r in runs if r.get("error") or "sum_received" not in r.get("end", {})]
if bad:
    print(f"bench-unshaped: iperf3 failed ({label}, round {rnd}): {bad}", file=sys.stderr)
    sys.exit(0)
bps = [r["end"]["sum_received"]["bits_per_second"] for r in runs]
print(json.dumps({"round": int(rnd), "what": label, "size": 0,
                  "mbps": round(sum(bps) / 1e6, 3), "cpus": round(cpus, 3)}))
PY
}

: >"$OUT/rows.jsonl"
for round in $(seq "$ROUNDS"); do
  {
    rmr "1 rail" --rails 198.18.0.2
    rmr "2 rails pinned" --rails 198.18.0.2,198.18.1.2 --engine pinned --policy even
    rmr "2 rails inline" --rails 198.18.0.2,198.18.1.2 --engine inline --policy even
    rmr "2 rails fork-join" --rails 198.18.0.2,198.18.1.2 --engine fork-join --policy even
    # The sender's send buffer left to the kernel's autotuning (as before
    # near_sndbuf): what the near peers' 512 KiB buffer is worth.
    CLIENT_ENV=RMR_TCP_NEAR=off rmr "1 rail, sndbuf autotuned" --rails 198.18.0.2
    CLIENT_ENV=RMR_TCP_NEAR=off rmr "2 rails pinned, sndbuf autotuned" \
      --rails 198.18.0.2,198.18.1.2 --engine pinned --policy even
    iperf "iperf3 1 stream" 198.18.0.2
    iperf "iperf3 2 streams" 198.18.0.2,198.18.1.2
    iperf "iperf3 1 stream, 1 MiB writes" 198.18.0.2 1048576
    iperf "iperf3 2 streams, 1 MiB writes" 198.18.0.2,198.18.1.2 1048576
  } | tee -a "$OUT/rows.jsonl"
done
fi

python3 - "$OUT/rows.jsonl" "$(cat "$OUT/commit")" "$ROUNDS" >"$OUT/summary.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
commit, rounds = sys.argv[2], int(sys.argv[3])
whats = ["1 rail", "2 rails pinned", "2 rails inline", "2 rails fork-join",
         "1 rail, sndbuf autotuned", "2 rails pinned, sndbuf autotuned",
         "iperf3 1 stream", "iperf3 2 streams", "iperf3 1 stream, 1 MiB writes",
         "iperf3 2 streams, 1 MiB writes"]
def get(what, size, rnd):
    # iperf3 with its own writes (size 0) stands for every size.
    for r in rows:
        if r["what"] == what and r["round"] == rnd and r["size"] in (size, 0):
            return r
    return None
print(f"`scripts/bench-unshaped.sh {rounds}` at {commit}: two unshaped veth rails, "
      "{} interleaved rounds; Gbit/s per round, then the median; busy CPUs of the whole "
      "machine (client, server, kernel; {} CPUs) and CPU-seconds per Gbit.\n".format(rounds, __import__('os').cpu_count()))
print("| size | what | Gbit/s each round | median Gbit/s | median busy CPUs | CPU s per Gbit |")
print("|---|---|---|---|---|---|")
med = {}
for size in (1 << 20, 4 << 20):
    for w in whats:
        rs = [get(w, size, k) for k in range(1, rounds + 1)]
        rs = [r for r in rs if r]
        if not rs:
            continue
        g = [r["mbps"] / 1000 for r in rs]
        c = [r["cpus"] for r in rs if r.get("cpus") is not None]
        m = statistics.median(g)
        mc = statistics.median(c) if c else float("nan")
        med[(size, w)] = (m, mc)
        per = statistics.median([r["cpus"] / (r["mbps"] / 1000) for r in rs if r.get("cpus") and r["mbps"] > 0]) if c else float("nan")
        print(f"| {size >> 20} MiB | {w} | {', '.join(f'{x:.1f}' for x in g)} | {m:.1f} | {mc:.2f} | {per:.3f} |")
print()
print("Goals (median of the per-round ratios, each round's ratio between its own runs):\n")
def ratio(size, a, b, goal):
    rs = []
    for k in range(1, rounds + 1):
        x, y = get(a, size, k), get(b, size, k)
        if x and y and y["mbps"] > 0:
            rs.append(x["mbps"] / y["mbps"])
    if not rs:
        return
    m = statistics.median(rs)
    verdict = "met" if m >= goal else "not met"
    print(f"- {size >> 20} MiB, {a} / {b}: **{m:.2f}** (goal >= {goal}: {verdict}; rounds "
          f"{', '.join(f'{x:.2f}' for x in rs)})")
for size in (1 << 20, 4 << 20):
    for e in ("pinned", "inline", "fork-join"):
        ratio(size, f"2 rails {e}", "iperf3 2 streams", 0.9)
        ratio(size, f"2 rails {e}", "1 rail", 1.3)
    ratio(size, "1 rail", "iperf3 1 stream", 0.95)
print("\nThe same against iperf3 writing and reading 1 MiB at a time (`-l 1M`, "
      "its largest), not a goal: how much of a gap is the caches.\n")
for size in (1 << 20, 4 << 20):
    for e in ("pinned", "inline"):
        ratio(size, f"2 rails {e}", "iperf3 2 streams, 1 MiB writes", 0.9)
    ratio(size, "1 rail", "iperf3 1 stream, 1 MiB writes", 0.95)
print("\nThe near send buffer (512 KiB for one rail, 256 KiB per rail of two) against the "
      "kernel's autotuning, the sender's (`RMR_TCP_NEAR=off` on the client), not a goal:\n")
for size in (1 << 20, 4 << 20):
    ratio(size, "1 rail", "1 rail, sndbuf autotuned", 1.0)
    ratio(size, "2 rails pinned", "2 rails pinned, sndbuf autotuned", 1.0)
PY
cat "$OUT/summary.md"
