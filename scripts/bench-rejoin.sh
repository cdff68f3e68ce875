#!/usr/bin/env bash
# A healed rail's bandwidth after it rejoins ([resilience-2]): runs the lab
# test multirail/tests/rejoin_lab.rs (two 200 Mbit/s rails; rail 1 cut until
# declared down, restored, three times during a checked stream of 1 MiB
# writes, 8 in flight) RUNS times in release, and writes each cycle's rates
# and the summary to bench-out/rejoin/. Needs root (network namespaces);
# the test removes its lab when done.
#   scripts/bench-rejoin.sh [RUNS]     (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
OUT=bench-out/rejoin
mkdir -p "$OUT"
: > "$OUT/rows.txt"
for i in $(seq 1 "$RUNS"); do
  echo "run $i of $RUNS" >&2
  cargo test --release -q -p multirail --test rejoin_lab -- --nocapture 2>&1 \
    | grep -E '^RATE' | sed "s/^RATE /run=$i /" >> "$OUT/rows.txt"
done
python3 - "$OUT" <<'PY'
import os, statistics, sys
out = sys.argv[1]
rows = [dict(kv.split("=", 1) for kv in l.split()) for l in open(os.path.join(out, "rows.txt")) if l.strip()]
before = {r["run"]: float(r["two_rails_before"]) for r in rows if "two_rails_before" in r}
cycles = [r for r in rows if "cycle" in r]
lines = ["Command: `scripts/bench-rejoin.sh %d` (lab: two 200 Mbit/s tbf rails, pinned engine, even policy; "
         "a stream of 1 MiB RDMA writes, 8 in flight, each checked by the server; rail 1 cut until both ends "
         "declare it down (tcp user timeout 1.5 s), restored 2 s later, three times per run)." % len(before), "",
         "| run | cycle | two rails before the first cut, Mbit/s | one rail (rail 1 down), Mbit/s | first 2 s after RailUp, Mbit/s | / one rail | second s after RailUp, Mbit/s | / one rail | RailDown to RailUp, ms |",
         "|---|---|---|---|---|---|---|---|---|"]
for r in cycles:
    lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (r["run"], r["cycle"], before.get(r["run"], "-"),
                 r["one_rail"], r["after_up_2s"], r["ratio"], r["second_s"], r["ratio_by_2s"], r["down_to_up_ms"]))
if cycles:
    by2 = [float(r["ratio_by_2s"]) for r in cycles]
    avg = [float(r["ratio"]) for r in cycles]
    steady = [before[r["run"]] / float(r["one_rail"]) for r in cycles if float(r["one_rail"]) > 0]
    m = statistics.median(by2)
    lines += ["", "- Two rails in the second second after each RailUp (returned within 2 s) over one rail: median **%.2fx** over %d restores "
              "(min %.2f, max %.2f); target >= 1.9x within 2 s: **%s**." % (m, len(by2), min(by2), max(by2), "met" if m >= 1.9 else "not met"),
              "- Averaged over the whole first 2 s (the new connection's ramp included): median %.2fx (min %.2f)." % (statistics.median(avg), min(avg)),
              "- For scale, two rails before the first cut over one rail: median %.2fx." % statistics.median(steady)]
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
